"""table.md: the three sharing policies side by side (benchmarks/clock_rounds.py's rounds.json):
per (nodes, links), each policy's virtual seconds of one barrier round (mean over the seeds; the
greedy/fair and fifo/fair ratios per seed, their range) and its host seconds.

    python results/clock_policies_cpu/table.py results/clock_policies_cpu/rounds.json > results/clock_policies_cpu/table.md
"""
from __future__ import annotations

import json
import sys

import pandas as pd

LINKS = {"uniform_60": "uniform 60 Mbit/s", "divshare": "DivShare (7 in 60 at 10-13 Mbit/s)"}


def main() -> None:
    d = json.load(open(sys.argv[1]))
    df = pd.DataFrame(d["rows"])
    if "seed" not in df:
        df["seed"] = 0
    piv = df.pivot_table(index=["nodes", "links", "seed"], columns="policy", values="virtual_seconds")
    host = df.pivot_table(index=["nodes", "links", "seed"], columns="policy", values="host_seconds")
    lines = [f"`{d['command']}` ({d['machine']})", "",
             "| nodes | links | seeds | fair s | fifo s | greedy s | greedy / fair (range) | fifo / fair | "
             "host s: fair | fifo | greedy |", "|" + "---|" * 11]
    for (n, links), g in piv.groupby(level=[0, 1]):
        h = host.loc[(n, links)]
        ratio = g["greedy"] / g["fair"]
        lines.append(f"| {n} | {LINKS[links]} | {len(g)} | {g['fair'].mean():.3f} | {g['fifo'].mean():.3f} | "
                     f"{g['greedy'].mean():.3f} | {ratio.mean():.2f} ({ratio.min():.2f}-{ratio.max():.2f}) | "
                     f"{(g['fifo'] / g['fair']).mean():.2f} | {h['fair'].mean():.4f} | {h['fifo'].mean():.4f} | "
                     f"{h['greedy'].mean():.3f} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
