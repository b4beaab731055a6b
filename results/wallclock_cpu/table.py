"""wallclock.md / wallclock.csv: the runs of make.sh side by side across both engines, per (method,
links): virtual seconds to 70 / 80 / 90% mean accuracy (mean over the seeds that reached it; "k/3"
when not all did), rounds (round engine) to 80 / 90%, the final mean accuracy, the mean seconds a
round took, the mean accuracy at 150 virtual seconds (``--at``; every run's horizon covers it), and the
tick runs' mean message staleness. Read from each run's summary.json and
metrics.csv (accuracy is checked at every evaluation: every 10 rounds or 10 virtual seconds).

    python results/wallclock_cpu/table.py results/wallclock_cpu/runs --out results/wallclock_cpu
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd


def first(df: pd.DataFrame, col: str, p: float):
    hit = df[df.acc_mean >= p]
    return float(hit[col].iloc[0]) if len(hit) else np.nan


def rows(root: Path, at: float = 150.0) -> pd.DataFrame:
    out = []
    for summ in sorted(root.rglob("summary.json")):
        s = json.loads(summ.read_text())
        c, m = s["config"], pd.read_csv(summ.parent / "metrics.csv")
        up = c["clock"]["links"]["uplink"]
        tick = s["engine"] == "tick"
        barrier = ", per-node barrier" if c["clock"].get("barrier", "global") == "node" else ""
        label = s["method"] if tick else f"{s['method']} (momentum {c['optim']['momentum']:g}{barrier})"
        row = {"method": label, "engine": s["engine"], "seed": c["seed"],
               "links": "DivShare (7 of 60 at 10-13 Mbit/s)" if isinstance(up, list) else f"uniform {up:g} Mbit/s",
               "final_acc": float(m.acc_mean.iloc[-1]), "virtual_seconds": s["clock"]["virtual_seconds"],
               "staleness": s["clock"].get("staleness_mean") if tick else np.nan,
               "round_seconds": np.nan if tick else s["clock"]["virtual_seconds"] / s["rounds_run"]}
        for p in (70, 80, 90):
            row[f"s_to_{p}"] = first(m, "seconds", p / 100)
        upto = m[m.seconds <= at + 1e-9]
        row["acc_at"] = float(upto.acc_mean.iloc[-1])                     # the same virtual time for every run
        row["rounds_to_80"] = np.nan if tick else first(m, "round", 0.8)
        row["rounds_to_90"] = np.nan if tick else first(m, "round", 0.9)
        out.append(row)
    return pd.DataFrame(out)


def cell(g: pd.Series, fmt: str) -> str:
    ok = g.dropna()
    if ok.empty:
        return f"0/{len(g)}"
    text = format(ok.mean(), fmt)
    return text if len(ok) == len(g) else f"{text} ({len(ok)}/{len(g)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--at", type=float, default=150.0, help="the virtual second of the 'acc at' column")
    a = ap.parse_args()
    df = rows(a.runs, a.at)
    df.to_csv(a.out / "wallclock.csv", index=False)
    lines = ["| method | engine | links | s to 70% | s to 80% | s to 90% | rounds to 80% | rounds to 90% | s a round | "
             f"acc at {a.at:g} s | final acc (at s) | staleness s | seeds |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (method, engine, links), g in df.groupby(["method", "engine", "links"], sort=True):
        lines.append(f"| {method} | {engine} | {links} | {cell(g.s_to_70, '.1f')} | {cell(g.s_to_80, '.1f')} | "
                     f"{cell(g.s_to_90, '.1f')} | {cell(g.rounds_to_80, '.0f') if engine == 'rounds' else '-'} | "
                     f"{cell(g.rounds_to_90, '.0f') if engine == 'rounds' else '-'} | "
                     f"{cell(g.round_seconds, '.3f') if engine == 'rounds' else '-'} | {100 * g.acc_at.mean():.1f}% | "
                     f"{100 * g.final_acc.mean():.1f}% ({g.virtual_seconds.max():.0f}) | "
                     f"{cell(g.staleness, '.3f') if engine == 'tick' else '-'} | {len(g)} |")
    (a.out / "wallclock.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
