"""Scaling studies from runs that differ in the number of nodes (part of ``python -m
vecgossip.report``; presets ``scaling`` and ``scaling_rounds``):

  scaling.csv   one row per run: engine, method, N (nodes or clients), reach ticks, ticks or rounds
                run, wall seconds, seconds per tick (round), peak memory, memory.estimate's figure
  scaling.md    the table, the fitted exponents b of seconds per tick (round) = a N^b per method
                (least squares in log-log over the runs' N), and the memory estimate against the
                measured peak (ratio; the estimate is meant to be within 20%)
  scaling.png   log-log: reach tick vs N, seconds per tick (round) vs N with the fits, peak memory
                vs N beside the estimate

Written when some method was run at three or more sizes.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from vecgossip.core.files import atomic_path, write_csv
from vecgossip.runtime.outputs import found

MIN_SIZES = 3


def gib(n: int | None) -> float:
    """Bytes as GiB; NaN where a run did not record them (older runs, platforms without a peak)."""
    return n / 2**30 if n else np.nan


def load(root: Path, within: list[Path] | None = None) -> pd.DataFrame:
    rows = []
    for summ in found(root, "summary.json", within):
        s = json.loads(summ.read_text())
        if s.get("replicas", 1) > 1 or "engine" not in s:
            continue
        tick = s["engine"] == "tick"
        steps = s.get("ticks_run") if tick else s.get("rounds_run")
        mem = s.get("memory") or {}
        cfg = s.get("config") or {}
        rows.append({"run_dir": str(summ.parent.relative_to(root)) or ".", "engine": s["engine"],
                     "method": s["method"], "N": s.get("n_nodes") if tick else s.get("n_clients"),
                     "model": (cfg.get("model") or {}).get("name"), "seed": cfg.get("seed"),
                     "first_reach_tick": s.get("first_reach_tick"), "most_reach_tick": s.get("most_reach_tick"),
                     "steps": steps, "wall_seconds": s["wall_seconds"],
                     "seconds_per_step": s["wall_seconds"] / max(1, steps or 1),
                     "peak_GiB": gib(mem.get("peak_bytes")), "estimate_GiB": gib(mem.get("estimate_bytes"))})
    df = pd.DataFrame(rows)
    if not df.empty:
        df["estimate_over_peak"] = df.estimate_GiB / df.peak_GiB
    return df


def scaled(df: pd.DataFrame) -> pd.DataFrame:
    """The (engine, method) groups run at MIN_SIZES or more sizes."""
    if df.empty:
        return df
    sizes = df.groupby(["engine", "method"]).N.transform("nunique")
    return df[sizes >= MIN_SIZES].sort_values(["engine", "method", "N"]).reset_index(drop=True)


def exponent(n: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(a, b) of y = a n^b, least squares in log-log."""
    b, log_a = np.polyfit(np.log(n), np.log(y), 1)
    return float(np.exp(log_a)), float(b)


def markdown(df: pd.DataFrame) -> str:
    out = ["# Scaling with the number of nodes", "",
           "Seconds per tick (tick engine) or per round (round engine) are the run's wall time over its "
           "ticks or rounds, evaluation included; peak memory is the process's peak resident set (CPU) or "
           "CUDA's peak allocation; the estimate is `vecgossip.runtime.memory.estimate`, what the pre-run check "
           "compares with the free memory.", ""]
    unit = {"tick": "tick", "rounds": "round"}
    out += ["| engine | method | N | most-reach tick | steps run | s per tick/round | peak GiB | estimate GiB "
            "| estimate / peak |", "|---|---|---|---|---|---|---|---|---|"]
    for _, r in df.iterrows():
        reach = "-" if r.engine != "tick" else ("not by %d" % r.steps if pd.isna(r.most_reach_tick)
                                                else f"{int(r.most_reach_tick)}")
        out.append(f"| {r.engine} | {r.method} | {int(r.N)} | {reach} | {int(r.steps)} | {r.seconds_per_step:.4g} | "
                   f"{r.peak_GiB:.3g} | {r.estimate_GiB:.3g} | {r.estimate_over_peak:.2f} |")
    out += ["", "Fitted exponents, seconds per step = a N^b (least squares in log-log):", "",
            "| engine | method | b | a | sizes |", "|---|---|---|---|---|"]
    for (eng, m), g in df.groupby(["engine", "method"], sort=False):
        a, b = exponent(g.N.to_numpy(float), g.seconds_per_step.to_numpy(float))
        out.append(f"| {eng} | {m} | {b:.2f} | {a:.3g} s per {unit[eng]} | {', '.join(str(int(v)) for v in g.N)} |")
    ratio = df.estimate_over_peak.dropna()
    if not ratio.empty:
        worst = df.loc[(ratio - 1).abs().idxmax()]
        out += ["", f"Memory estimate against the measured peak: {ratio.min():.2f}-{ratio.max():.2f}x "
                f"(furthest: {worst.method} at N = {int(worst.N)}, {worst.estimate_GiB:.3g} vs {worst.peak_GiB:.3g} GiB); "
                f"{'every run within 20%' if ((ratio - 1).abs() <= 0.2).all() else 'NOT every run within 20%'}."]
    return "\n".join(out) + "\n"


def plot(df: pd.DataFrame, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for (eng, m), g in df.groupby(["engine", "method"], sort=False):
        label = f"{m} ({eng})"
        reached = g.dropna(subset=["most_reach_tick"])
        if eng == "tick" and not reached.empty:
            axes[0].plot(reached.N, reached.most_reach_tick, "o-", label=label)
        n, y = g.N.to_numpy(float), g.seconds_per_step.to_numpy(float)
        a, b = exponent(n, y)
        line = axes[1].plot(n, y, "o", label=f"{label}: N^{b:.2f}")[0]
        axes[1].plot(n, a * n ** b, "-", color=line.get_color(), lw=1)
        axes[2].plot(g.N, g.peak_GiB, "o-", label=f"{label} peak")
        axes[2].plot(g.N, g.estimate_GiB, "x--", color=axes[2].lines[-1].get_color(), label=f"{label} estimate")
    titles = ("ticks until most nodes reach 90%", "seconds per tick (round)", "memory, GiB")
    for ax, title in zip(axes, titles):
        ax.set_xscale("log")
        ax.set_yscale("log" if ax is not axes[0] else "linear")   # reach ticks: a flat line is the finding
        ax.set_xlabel("N (nodes / clients)")
        ax.set_title(title)
        if ax.lines:
            ax.legend(fontsize=7)
    axes[0].set_ylim(bottom=0)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)


def report(root: Path, out: Path, within: list[Path] | None = None) -> str | None:
    """Write the scaling outputs into ``out`` if ``root`` holds a scaling study; returns the markdown."""
    df = scaled(load(root, within))
    if df.empty:
        return None
    write_csv(df, out / "scaling.csv")
    md = markdown(df)
    with atomic_path(out / "scaling.md") as tmp:
        tmp.write_text(md)
    plot(df, out / "scaling.png")
    return md
