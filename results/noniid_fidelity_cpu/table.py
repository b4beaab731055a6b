"""Issue 28's table: most-reach(0.9) tick per reading x Table I row, mean +- std over seeds, beside
the paper's VC alpha=0.5 value with the ratio ours/paper.

    python results/noniid_fidelity_cpu/table.py RUN_ROOT [--out results/noniid_fidelity_cpu]

Reads RUN_ROOT/<reading>/<row>/seed<s>/summary.json (make.sh), merges them into runs.csv (cells
there from earlier runs stay unless rerun); writes table.md, table.csv and a copy of every new
run's summary.json and metrics.csv under runs/."""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

PAPER = {"row1": ("10", 1, 8, 1200), "row2": ("10", 1, 32, 1390), "row5": ("10", 4, 8, 1350),
         "row9": ("1-19", 1, 8, 1290)}
READINGS = {
    "r1_label_mix": "1. today's: p_n ~ Dir(0.5 1_10), images from the whole set; fixed 100 test images",
    "r2_shards": "2. disjoint shards (per class, Dir(0.5 1_N) shares); fixed 100 test images",
    "r3_local_eval": "3. as 1, each node tested on 100 images of its own label mix",
    "r4_full_eval": "4. as 1, tested on all 10,000 test images (every 50 ticks)",
    "r5_prior_mix": "5. p_n ~ Dir(0.5 x 1_10/10) (Hsu et al. 2019's alpha); fixed 100 test images",
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("root", type=Path)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    a = ap.parse_args()
    rows = []
    for summ in sorted(a.root.glob("*/*/seed*/summary.json")):
        s = json.loads(summ.read_text())
        reading, row, seed = summ.parts[-4], summ.parts[-3], int(summ.parts[-2][4:])
        rows.append({"reading": reading, "row": row, "seed": seed, "most_reach_tick": s["most_reach_tick"],
                     "first_reach_tick": s["first_reach_tick"], "ticks_run": s["ticks_run"],
                     "wall_seconds": s["wall_seconds"], "sampler": s["config"]["data"]["sampler"],
                     "eval_set": s["config"]["data"]["eval_set"]})
        dest = a.out / "runs" / summ.parent.relative_to(a.root)
        dest.mkdir(parents=True, exist_ok=True)
        for f in ("summary.json", "metrics.csv"):
            shutil.copy2(summ.parent / f, dest / f)
    df = pd.DataFrame(rows)
    old = a.out / "runs.csv"   # cells run earlier (perhaps on another machine) stay unless rerun
    if old.exists():
        prev = pd.read_csv(old)
        if not df.empty:
            key = prev[["reading", "row", "seed"]].apply(tuple, axis=1)
            new = set(df[["reading", "row", "seed"]].apply(tuple, axis=1))
            prev = prev[~key.isin(new)]
        df = pd.concat([prev, df], ignore_index=True) if not df.empty else prev
    df = df.sort_values(["reading", "row", "seed"], kind="stable").reset_index(drop=True)
    df.to_csv(old, index=False)
    cells = []
    for reading, label in READINGS.items():
        for row, (t, r, k, paper) in PAPER.items():
            g = df[(df.reading == reading) & (df.row == row)] if not df.empty else df
            hit = g.most_reach_tick.dropna().to_numpy(float) if not g.empty else np.array([])
            miss = 0 if g.empty else int(g.most_reach_tick.isna().sum())
            mean = float(hit.mean()) if hit.size else float("nan")
            std = float(hit.std(ddof=1)) if hit.size > 1 else float("nan")
            cells.append({"reading": reading, "row": row, "t_acq": t, "R": r, "k": k, "n": int(len(g)),
                          "not_reached_by_3000": miss, "mean": mean, "std": std, "paper": paper,
                          "ratio": mean / paper if hit.size else float("nan")})
    table = pd.DataFrame(cells)
    table.to_csv(a.out / "table.csv", index=False)
    md = ["| reading | " + " | ".join(f"{row} (T_acq {t}, R {r}, k {k}; paper {p})" for row, (t, r, k, p)
                                      in PAPER.items()) + " |",
          "|---|" + "---|" * len(PAPER)]
    for reading, label in READINGS.items():
        out = []
        for row in PAPER:
            c = table[(table.reading == reading) & (table.row == row)].iloc[0]
            if c.n == 0:
                out.append("not run")
                continue
            txt = f"{c['mean']:.0f}" if c.n - c.not_reached_by_3000 else "-"
            if c.n - c.not_reached_by_3000 > 1:
                txt += f" ± {c['std']:.0f}"
            txt += f" (n={c.n}"
            txt += f", {c.not_reached_by_3000} not by 3000)" if c.not_reached_by_3000 else ")"
            if c.n - c.not_reached_by_3000:
                txt += f" {c.ratio:.2f}x"
            out.append(txt)
        md.append(f"| {label} | " + " | ".join(out) + " |")
    (a.out / "table.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
