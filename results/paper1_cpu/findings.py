"""The numbers of the Paper 1 page's N = 50 findings and of this folder's cost table, from the
committed runs (table1.csv, n50_runs.csv; run results/paper1_cpu/table.py first):

    python results/paper1_cpu/findings.py
"""
import json
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
t1 = pd.read_csv(HERE / "table1.csv")
n50 = t1[(t1.N == 50) & t1.method.isin(["tl_compression", "vc"])]
print("ratio ranges at N = 50 (ours / paper):")
for (m, d), g in n50.groupby(["method", "data"]):
    print(f"  {m} {d}: {g.ratio.min():.2f}-{g.ratio.max():.2f}x over {len(g)} cells, seeds {sorted(set(g.seeds))}")
sd = n50.most_reach_std.dropna()
print(f"seed sd: {sd.min():.0f}-{sd.max():.0f} ticks, {100 * (n50.most_reach_std / n50.most_reach_mean).min():.0f}-"
      f"{100 * (n50.most_reach_std / n50.most_reach_mean).max():.0f}% of the mean")
for m in ("tl_compression", "vc"):
    g = n50[(n50.method == m) & (n50.seeds >= 2)].copy()
    g["z"] = (g.most_reach_mean - g.paper).abs() / g.most_reach_std
    print(f"{m}, cells with >= 2 seeds: {len(g)}; |ours - paper| / sd: {g.z.min():.2f}-{g.z.max():.2f}; "
          f"within 2.5 sd: {(g.z <= 2.5).sum()} of {len(g)}")
    for _, r in g[g.z > 2.5].iterrows():
        print(f"    beyond: T_acq {r.t_acq}, R {r.R}, k {r.k}, {r.data}: {r.most_reach_mean:.0f} ± {r.most_reach_std:.0f} "
              f"vs {r.paper:.0f} ({r.ratio:.2f}x, {r.z:.1f} sd, n={r.seeds})")
runs = pd.read_csv(HERE / "n50_runs.csv")
runs["device"] = [json.loads((HERE / "runs" / d / "summary.json").read_text())["config"]["device"] for d in runs.run_dir]
print("runs by device:", runs.groupby(["method", "device"]).size().to_dict())
print("GPU (lent H200, results/paper1_cpu/gpu_n50.sh) wall s per run:",
      runs[runs.device == "cuda"].groupby(["k", "R"]).wall_seconds.agg(["count", "mean", "min", "max"]).round(0).to_dict("index"))
runs = runs[runs.device == "cpu"]                         # the cost table: CPU runs only
print("\n| method | k | R | runs | mean s per run | CPU-hours so far |\n|---|---|---|---|---|---|")
for (m, k, r), g in runs.groupby(["method", "k", "R"]):
    name = "TL + compression" if m == "tl_compression" else "VC"
    print(f"| {name} | {k} | {r} | {len(g)} | {g.wall_seconds.mean():.0f} | {g.wall_seconds.sum() / 3600:.2f} |")
for m, g in runs.groupby("method"):
    per = g.groupby(["k", "R"]).wall_seconds.mean()
    full = float(np.sum(per.values) * 4 * 3 / 3600)          # each (k, R) mean x 2 t_acq x 2 data x 3 seeds
    print(f"{m}: {len(g)} runs on the CPU, {g.wall_seconds.sum() / 3600:.1f} CPU-hours, ~{full:.1f} for all 48 on the CPU")
