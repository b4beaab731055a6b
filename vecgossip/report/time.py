"""Runs in virtual seconds (clock.enabled), either engine's (the round engine's as dfl_time.md/.csv,
its curves in dfl_time.png: report/rounds.py):

  time.md / time.csv  per run group (method + the options that differ), the mean over seeds of
                      the virtual seconds to 50 / 70 / 90% mean accuracy, the final accuracy, the
                      messages' mean staleness and the bytes each node sent
  time.png            mean accuracy against virtual seconds, one line per group (mean over seeds)
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from vecgossip.core.files import atomic_path, write_csv

COLUMNS = ("virtual_seconds", "seconds_to_50", "seconds_to_70", "seconds_to_90", "staleness_mean", "bytes_sent_mean")


def columns(summary: dict) -> dict:
    """runs.csv's clock columns of one run (NaN when the run was not timed or never reached): the
    round engine's (report/rounds.py ``clock_fields``) and the tick engine's staleness and bytes."""
    from vecgossip.report.rounds import clock_fields
    c, nan = summary.get("clock") or {}, float("nan")
    return {**clock_fields(c), "staleness_mean": c.get("staleness_mean") or nan,
            "bytes_sent_mean": c.get("bytes_sent_mean", nan)}


def table(runs: pd.DataFrame) -> pd.DataFrame:
    timed = runs[runs.virtual_seconds.notna()] if "virtual_seconds" in runs else runs.iloc[:0]
    rows = []
    for (method, options), g in timed.groupby(["method", "options"], dropna=False, sort=True):
        row = {"method": method, "options": options, "seeds": len(g)}
        for p in (50, 70, 90):
            col = g[f"seconds_to_{p}"]
            row[f"seconds_to_{p}"] = float(col.mean()) if col.notna().all() else np.nan
            row[f"reached_{p}"] = int(col.notna().sum())
        row.update(final_acc_mean=float(g.final_acc_mean.mean()), staleness_mean=float(g.staleness_mean.mean()),
                   mbytes_sent_mean=float(g.bytes_sent_mean.mean()) / 1e6, virtual_seconds=float(g.virtual_seconds.max()))
        rows.append(row)
    return pd.DataFrame(rows)


def markdown(t: pd.DataFrame) -> str:
    if t.empty:
        return ""
    lines = ["## Time to accuracy (virtual seconds, clock.*)", "",
             "| method | options | seeds | s to 50% | s to 70% | s to 90% | final acc | staleness s | MB sent/node |",
             "|---|---|---|---|---|---|---|---|---|"]
    for _, r in t.iterrows():
        cells = []
        for p in (50, 70, 90):
            v = r[f"seconds_to_{p}"]
            cells.append(f"{v:.1f}" if pd.notna(v) else f"{r[f'reached_{p}']}/{r.seeds} by {r.virtual_seconds:.0f}")
        lines.append(f"| {r.method} | {r.options or '-'} | {r.seeds} | " + " | ".join(cells)
                     + f" | {100 * r.final_acc_mean:.1f}% | "
                     + (f"{r.staleness_mean:.2f}" if pd.notna(r.staleness_mean) else "-")
                     + f" | {r.mbytes_sent_mean:.1f} |")
    return "\n".join(lines) + "\n"


def plot(root: Path, runs: pd.DataFrame, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    timed = runs[runs.virtual_seconds.notna()]
    groups = list(timed.groupby(["method", "options"], dropna=False, sort=True))
    fig, ax = plt.subplots(figsize=(9, 4.8))
    cmap = plt.get_cmap("tab10" if len(groups) <= 10 else "tab20")
    for i, ((method, options), g) in enumerate(groups):
        curves = [pd.read_csv(root / d / "metrics.csv")[["seconds", "acc_mean"]] for d in g.run_dir]
        mean = pd.concat(curves).groupby("seconds").acc_mean.mean()
        ax.plot(mean.index, mean.values, lw=1.4, color=cmap(i % cmap.N),
                label=f"{method} {options or ''}".strip() + (f" (mean of {len(g)})" if len(g) > 1 else ""))
    ax.set_xlabel("virtual seconds")
    ax.set_ylabel("mean accuracy")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)


def report(root: Path, out: Path, runs: pd.DataFrame, stem: str = "time", curves: bool = True) -> str:
    """``stem``.md/.csv (and .png with ``curves``) when any run was timed; returns the markdown
    ('' when none was)."""
    t = table(runs)
    if t.empty:
        return ""
    write_csv(t, out / f"{stem}.csv")
    md = markdown(t)
    with atomic_path(out / f"{stem}.md") as tmp:
        tmp.write_text(md)
    if curves:
        plot(root, runs, out / f"{stem}.png")
    return md


def round_runs(dfl: pd.DataFrame) -> pd.DataFrame:
    """The round engine's rows (report/rounds.py) in this table's terms: a group is a method on a
    topology with the options that differ; the final accuracy is the mean local-test accuracy; the
    bytes are each client's in all; no staleness (every message of a round is waited for)."""
    if dfl.empty or "virtual_seconds" not in dfl:
        return dfl.iloc[:0]
    return pd.DataFrame({"run_dir": dfl.run_dir, "method": dfl.method + " / " + dfl.topology,
                         "options": dfl.options if "options" in dfl else "",
                         "virtual_seconds": dfl.virtual_seconds,
                         **{f"seconds_to_{p}": dfl[f"seconds_to_{p}"] for p in (50, 70, 90)},
                         "final_acc_mean": dfl.acc_mean, "staleness_mean": np.nan,
                         "bytes_sent_mean": dfl.bytes_per_client.astype(float)})
