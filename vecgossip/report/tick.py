"""Turn a run or multirun directory into the papers' tables and figures.

    python -m vecgossip.report DIR [--out OUT]

Reads every ``summary.json`` under DIR (a job directory without one is reported as incomplete,
never silently dropped; a ``replicas=S`` run counts as its S ``replica*/`` runs) and writes into OUT (default DIR). Round-engine runs (paper 2) get
rounds.csv, dfl_topology.md/.csv and dfl_*.png (report_rounds.py), and with Byzantine clients
byzantine.md/.csv/.png (report_byzantine.py), with DP-SGD runs privacy.md/.csv/.png
(report_privacy.py); tick-engine runs (paper 1):
  runs.csv        one tidy row per run (knobs, method, seed, reach ticks, wall time)
  table1.csv/.md  Table I layout: our most-reach ticks (mean +- std over seeds) beside the paper's,
                  with the ratio ours/paper; "not reached" cells say by which tick
  fig8e.png       first/most-reach bars per method and data setting (Fig. 8e)
  accuracy_bands.png, variance.png, weight_difference.png  curves of every run group
  time.md/.csv/.png  runs in virtual seconds (clock.enabled): seconds to accuracy (report/time.py)
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from vecgossip.core.files import atomic_path, write_csv
from vecgossip.runtime.outputs import found
from vecgossip.report.paper import TABLE1, paper_table1
from vecgossip.report import byzantine as report_byzantine, privacy as report_privacy, rounds as report_rounds, \
    scaling as report_scaling, time as report_time
from vecgossip.report.grouping import add_option_column


def t_acq_label(v) -> str:
    if isinstance(v, (list, tuple)):
        return f"{v[0]}-{v[1]}" if v[0] != v[1] else str(v[0])
    return str(v)


def data_label(alpha) -> str:
    return "iid" if alpha is None else f"alpha={alpha:g}"


def infer_method(c: dict) -> str:
    """Method of a run whose summary predates the ``method`` field, from its parameters."""
    if c["engine"].get("server"):
        return "fedavg_tick"
    if c["engine"].get("tl", {}).get("enabled") and c["averaging"].get("compression", 1.0) < 1.0:
        return "tl_compression"
    return "vc" if c["averaging"]["correction"] else "gossip"


def is_demo_parent(hydra_dir: Path) -> bool:
    """A ``.hydra/`` of the default job (``python -m vecgossip`` alone, vecgossip/composition/demo.py): its folder
    holds the compared runs in subfolders and never a summary.json of its own, so it is not an
    incomplete run. Decided by the demo's own rule on the job's recorded config and overrides."""
    from vecgossip.config import default_job
    try:
        cfg = OmegaConf.load(hydra_dir / "config.yaml")
        overrides = list(OmegaConf.load(hydra_dir / "overrides.yaml"))
        multirun = OmegaConf.select(OmegaConf.load(hydra_dir / "hydra.yaml"), "hydra.mode") == "MULTIRUN"
    except (OSError, ValueError):       # no or unreadable records: count the folder as a job
        return False
    return default_job.wanted(cfg, [str(o) for o in overrides], multirun)


def load_runs(root: Path, within: list[Path] | None = None) -> tuple[pd.DataFrame, list[str]]:
    """One row per complete run, plus the job directories that have no summary.json."""
    rows, incomplete, configs = [], [], []
    for summ in found(root, "summary.json", within):
        s = json.loads(summ.read_text())
        if s.get("engine") == "rounds" or s.get("replicas", 1) > 1:
            continue            # report_rounds reads those; a replica batch's runs are its replica*/ folders
        c = s["config"]
        configs.append(c)
        read = s.get("knobs_read")                  # None: a summary from before it was recorded
        shown = lambda knob, value, blank=None: value if read is None or knob in read else blank  # noqa: E731
        rows.append({
            "run_dir": str(summ.parent.relative_to(root)) or ".",
            "name": s.get("name"), "method": s.get("method") or infer_method(c),
            "t_acq": shown("t_acq", t_acq_label(c["engine"]["t_acq"]), "-"), "R": shown("R", c["averaging"]["R"]),
            "N": c["topology"]["n"], "k": shown("degree", c["topology"].get("k")),
            "topology": c["topology"]["name"], "data": data_label(c["data"]["alpha"]),
            "beta": shown("beta", c["averaging"]["beta"]), "correction": shown("correction", c["averaging"]["correction"]),
            "compression": shown("compression", c["averaging"].get("compression", 1.0)), "seed": c["seed"],
            "first_reach_tick": s["first_reach_tick"], "most_reach_tick": s["most_reach_tick"],
            "plateau_delay_tick": s["plateau_delay_tick"], "ticks_run": s["ticks_run"],
            "max_ticks": c["engine"]["max_ticks"], "wall_seconds": s["wall_seconds"],
            "final_acc_mean": s.get("final_acc_mean"), "final_acc_min": s.get("final_acc_min"),
            "attack": (s.get("adversary") or {}).get("attack", "none"),
            "byzantine": len((s.get("adversary") or {}).get("byzantine", [])),
            "diverged_tick": (s.get("diverged") or {}).get("tick"),
            **report_time.columns(s),
        })
    for hyd in found(root, ".hydra", within):
        job = hyd.parent
        if not (job / "summary.json").exists() and not is_demo_parent(hyd):
            incomplete.append(str(job.relative_to(root)) or ".")
    df = pd.DataFrame(rows)
    if not df.empty:
        df["k"] = df["k"].astype("Int64")   # star/FedAvg runs have no k: keep 8, not 8.0
        df["R"] = df["R"].astype("Int64")   # blank where the algorithm does not read it
    if not df.empty and (df.byzantine > 0).any():   # byzantine.md's cells: (topology, N, method) + the rest
        byz = df.copy()
        add_option_column(byz, configs, ["topology", "N", "method"])
        df["byzantine_options"] = byz["options"]
    add_option_column(df, configs, CELL)    # any other option that differs splits the cells
    return df, incomplete


def _cell(group: pd.DataFrame) -> dict:
    reached = group.most_reach_tick.dropna()
    n_not = int(group.most_reach_tick.isna().sum())
    out = {"seeds": len(group), "reached": len(reached), "not_reached": n_not,
           "most_reach_mean": float(reached.mean()) if len(reached) else np.nan,
           "most_reach_std": float(reached.std(ddof=1)) if len(reached) > 1 else np.nan,
           "ticks_run_max": int(group.ticks_run.max()),
           "wall_seconds_mean": float(group.wall_seconds.mean()),
           "final_acc_mean": (float(group.final_acc_mean.mean()) if "final_acc_mean" in group
                              and group.final_acc_mean.notna().all() else np.nan)}
    return out


CELL = ["t_acq", "R", "N", "k", "topology", "method", "data"]   # a Table I cell (+ the splitting options)


def table1(runs: pd.DataFrame) -> pd.DataFrame:
    """Tidy Table I: one row per (t_acq, R, N, k, method, data, options) cell that has runs or a
    paper value (the paper's cells only when one of Table I's methods ran); ``options`` names the other options that differ between runs (grouping.py), so
    seeds are pooled only when all else is equal."""
    keys = ["t_acq", "R", "N", "k", "method", "data", "options"]
    have = {} if runs.empty else {k: g for k, g in runs.groupby(keys, dropna=False)}
    cells = set(have)
    if runs.empty:
        fill = [""]
    elif runs.method.isin(["tl_compression", "vc"]).any():
        fill = sorted(set(runs.options))
    else:
        fill = []                 # no Table I method ran (a user's own algorithm): no "not run" filler
    for opts in fill:
        for (t, r, n, k) in TABLE1:
            for m in ("tl_compression", "vc"):
                for d in ("iid", "alpha=0.5"):
                    cells.add((t, r, n, k, m, d, opts))
    rows = []
    for key in cells:
        t, r, n, k, m, d, _ = key
        paper = paper_table1(t, r, n, k, m, d)
        row = dict(zip(keys, key), paper=paper)
        if key in have:
            row.update(_cell(have[key]))
        else:
            row.update(seeds=0, reached=0, not_reached=0, most_reach_mean=np.nan, most_reach_std=np.nan,
                       ticks_run_max=np.nan, wall_seconds_mean=np.nan)
        row["ratio"] = row["most_reach_mean"] / paper if paper and row["reached"] else np.nan
        rows.append(row)
    order = {key: i for i, key in enumerate(TABLE1)}
    df = pd.DataFrame(rows)
    df["_o"] = [order.get((t, r, n, k), 99) for t, r, n, k in zip(df.t_acq, df.R, df.N, df.k)]
    return (df.sort_values(["options", "_o", "t_acq", "R", "N", "k", "method", "data"]).drop(columns="_o")
            .reset_index(drop=True))


def _fmt(row) -> str:
    if row["seeds"] == 0:
        return "not run"
    parts = []
    if row["reached"]:
        s = f"{row['most_reach_mean']:.0f}"
        if row["reached"] > 1:
            s += f" ± {row['most_reach_std']:.0f}"
        parts.append(s)
    if row["not_reached"]:
        parts.append(f"{row['not_reached']}/{row['seeds']} not reached by {int(row['ticks_run_max'])}")
    if row["seeds"] > 1:
        parts.append(f"n={row['seeds']}")
    return "; ".join(parts)


def table1_markdown(t1: pd.DataFrame) -> str:
    """Table I's layout; one table per value of the splitting options, titled by them."""
    parts = []
    for opts, g in t1.groupby("options", sort=True):
        head = [f"## Runs with {opts}", ""] if opts else []
        parts.append("\n".join(head) + _table1_markdown(g))
    return "\n".join(parts)


def _table1_markdown(t1: pd.DataFrame) -> str:
    cols = [("tl_compression", "iid"), ("tl_compression", "alpha=0.5"), ("vc", "iid"), ("vc", "alpha=0.5")]
    head = ["T_acq", "R", "N", "k"] + [f"{'TL+comp' if m == 'tl_compression' else 'VC'} {d}: ours / paper (ratio)"
                                       for m, d in cols]
    in_paper = t1.method.isin(["tl_compression", "vc"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] if in_paper.any() else []
    extra = t1[~in_paper]
    for (t, r, n, k), g in t1[in_paper].groupby(["t_acq", "R", "N", "k"], sort=False):
        cells = []
        for m, d in cols:
            row = g[(g.method == m) & (g.data == d)]
            if row.empty:
                cells.append("not run")
                continue
            row = row.iloc[0]
            ratio = f" ({row['ratio']:.2f}x)" if not np.isnan(row["ratio"]) else ""
            paper = "?" if row["paper"] is None or (isinstance(row["paper"], float) and np.isnan(row["paper"])) else int(row["paper"])
            cells.append(f"{_fmt(row)} / {paper}{ratio}")
        lines.append(f"| {t} | {r} | {n} | {k} | " + " | ".join(cells) + " |")
    if not extra.empty:
        lines += (["", "Other methods (no paper value in Table I):", ""] if lines else ["Runs (no paper value in Table I):", ""]) + [
                  "| T_acq | R | N | k | method | data | most-reach | final mean accuracy |",
                  "|---|---|---|---|---|---|---|---|"]
        for _, row in extra.iterrows():
            k = "-" if pd.isna(row.k) else row.k
            r = "-" if pd.isna(row.R) else row.R
            final = "" if pd.isna(row.get("final_acc_mean", np.nan)) else f"{100 * row.final_acc_mean:.1f}%"
            lines.append(f"| {row.t_acq} | {r} | {row.N} | {k} | {row.method} | {row.data} | {_fmt(row)} | {final} |")
    return "\n".join(lines) + "\n"


def _group_label(r) -> str:
    """The run's method, data, N and the knobs it reads (k, T_acq, R: blank when unread)."""
    opts = f" {r['options']}" if r.get("options") else ""
    knobs = "".join(f" {name}={r[col]}" for name, col in (("k", "k"), ("T", "t_acq"), ("R", "R"))
                    if not pd.isna(r[col]) and r[col] != "-")
    return f"{r['method']} {r['data']} N={r['N']}{knobs}{opts}"


def plot_fig8e(runs: pd.DataFrame, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = runs[((runs.t_acq == "10") & (runs.R == 1) & (runs.N == 50)
                 & ((runs.k == 8) | (runs.topology == "star"))).fillna(False).astype(bool)]
    runs = base if not base.empty else runs   # Fig. 8e compares methods on the baseline network
    g = runs.groupby(["method", "data"]).agg(first=("first_reach_tick", "mean"), most=("most_reach_tick", "mean"),
                                             cap=("ticks_run", "max")).reset_index()
    fig, ax = plt.subplots(figsize=(7, 4))
    x = np.arange(len(g))
    for off, col, label in ((-0.2, "first", "first reaching 90%"), (0.2, "most", "most reaching 90%")):
        bars = ax.bar(x + off, g[col].fillna(0), 0.4, label=label)   # not reached: no bar, a label instead
        for b, missing, cap in zip(bars, g[col].isna(), g.cap):
            if missing:
                ax.text(b.get_x() + b.get_width() / 2, 0, f"not reached\nby {int(cap)}", rotation=90,
                        ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, [f"{m}\n{d}" for m, d in zip(g.method, g.data)], fontsize=9, rotation=30)
    ax.set_title("first / most reaching 90% (T_acq 10, R 1, N 50, k 8 when present)", fontsize=10)
    ax.set_ylabel("tick")
    ax.legend(fontsize=9)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)


def plot_curves(root: Path, runs: pd.DataFrame, path: Path, kind: str) -> None:
    """Overlay every run's curves: kind = accuracy (mean with min..max band), var_ or wdiff_ (ip1)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for _, r in runs.iterrows():
        m = pd.read_csv(root / r["run_dir"] / "metrics.csv")
        label = _group_label(r) + (f" s{r['seed']}" if runs.seed.nunique() > 1 else "")
        if kind == "accuracy":
            line, = ax.plot(m.tick, m.acc_mean, lw=1, label=label)
            ax.fill_between(m.tick, m.acc_min, m.acc_max, alpha=0.15, color=line.get_color())
            if r["most_reach_tick"] == r["most_reach_tick"] and r["most_reach_tick"] is not None:
                ax.axvline(r["most_reach_tick"], color=line.get_color(), ls=":", lw=1)
        else:
            cols = [c for c in m.columns if c.startswith(kind)]
            ax.plot(m.tick, m[cols].mean(axis=1) if kind == "var_" else m[cols[-2]], lw=1, label=label)
    ax.set_xlabel("tick")
    if kind != "accuracy":
        ax.set_yscale("log")
    ax.set_ylabel({"accuracy": "accuracy (mean, min..max band; dotted: most-reach)",
                   "var_": "weight variance (mean over layers)", "wdiff_": "weight difference (ip1)"}[kind])
    ax.legend(fontsize=6)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)


def report(root: Path | list[Path], out: Path | None = None) -> dict:
    """The tables and figures of the runs under ``root`` (a run or multirun directory; several:
    their runs together, as one set) into ``out`` (default: the one root)."""
    within = [Path(r).resolve() for r in root] if isinstance(root, (list, tuple)) else None
    root = Path(os.path.commonpath([str(r.resolve()) for r in within])) if within else Path(root)
    if within and len(within) == 1:
        root, within = within[0], None
    out = Path(out) if out else root
    runs, incomplete = load_runs(root, within)
    dfl = report_rounds.load_round_runs(root, within)
    if runs.empty and dfl.empty and not incomplete:
        raise FileNotFoundError(f"no summary.json under {root}: is this a vecgossip run or multirun directory?")
    res = {"runs": runs, "rounds": dfl, "incomplete": incomplete, "markdown": ""}
    scaling = report_scaling.report(root, out, within)  # runs at three or more sizes: scaling.md/.csv/.png
    if scaling:
        res["markdown"] = scaling + "\n"
    if not dfl.empty:
        round_tables(root, out, dfl, incomplete, res)
        if runs.empty:
            return res
    tick_tables(root, out, runs, incomplete, res)
    return res


def incomplete_note(incomplete: list[str]) -> str:
    return ("\nIncomplete runs (job directory without summary.json):\n\n" + "".join(f"- {d}\n" for d in incomplete)
            if incomplete else "")


def round_tables(root: Path, out: Path, dfl: pd.DataFrame, incomplete: list[str], res: dict) -> None:
    """The round engine's runs: rounds.csv, dfl_topology.md/.csv and the curves."""
    table = report_rounds.topology_table(dfl)
    md = report_rounds.topology_markdown(table, root, dfl) + incomplete_note(incomplete)
    write_csv(dfl, out / "rounds.csv")
    write_csv(table, out / "dfl_topology.csv")
    with atomic_path(out / "dfl_topology.md") as tmp:
        tmp.write_text(md)
    report_rounds.plot_curves(root, dfl, out)
    md += report_time.report(root, out, report_time.round_runs(dfl), "dfl_time", curves=False)   # (dfl_time.png: the curves)
    res.update(dfl_topology=table, markdown=res["markdown"] + md + report_byzantine.report(out, dfl)
               + report_privacy.report(out, dfl))


def tick_tables(root: Path, out: Path, runs: pd.DataFrame, incomplete: list[str], res: dict) -> None:
    """The tick engine's runs: runs.csv, table1.md/.csv and the figures."""
    t1 = table1(runs)
    if not runs.empty:
        write_csv(runs, out / "runs.csv")
    write_csv(t1, out / "table1.csv")
    md = table1_markdown(t1) + incomplete_note(incomplete)
    with atomic_path(out / "table1.md") as tmp:
        tmp.write_text(md)
    if not runs.empty:
        plot_fig8e(runs, out / "fig8e.png")
        shown = runs.head(24)  # keep the overlay readable
        plot_curves(root, shown, out / "accuracy_bands.png", "accuracy")
        plot_curves(root, shown, out / "variance.png", "var_")
        plot_curves(root, shown, out / "weight_difference.png", "wdiff_")
        md += report_time.report(root, out, runs)
    res.update(table1=t1, markdown=res["markdown"] + md + report_byzantine.report(out, byzantine_rows(runs),
                                                                                  noun="nodes"))


def byzantine_rows(runs: pd.DataFrame) -> pd.DataFrame:
    """The tick runs as byzantine.md's rows (report/byzantine.py): final honest accuracy, the worst
    honest node's, where a run diverged; cells split by every option but (topology, N, method)."""
    if runs.empty or "byzantine_options" not in runs or not (runs.byzantine > 0).any():
        return pd.DataFrame()
    return pd.DataFrame({"topology": runs.topology, "method": runs.method, "attack": runs.attack,
                         "byzantine": runs.byzantine, "options": runs.byzantine_options, "clients": runs.N,
                         "acc_mean": runs.final_acc_mean, "acc_min": runs.final_acc_min,
                         "diverged_round": runs.diverged_tick.astype(float)})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m vecgossip.report", description=__doc__.split("\n\n")[0])
    p.add_argument("dir", type=Path, nargs="+", help="a run or multirun directory (several: reported together)")
    p.add_argument("--out", type=Path, default=None, help="where to write (default: DIR)")
    a = p.parse_args(argv)
    for d in a.dir:
        if not d.is_dir():
            p.error(f"{d} is not a directory")
    res = report(a.dir if len(a.dir) > 1 else a.dir[0], a.out)
    print(res["markdown"])
    if res["incomplete"]:
        print(f"warning: {len(res['incomplete'])} incomplete run(s) listed in the tables", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
