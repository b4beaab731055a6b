"""table.md / table.csv / accuracy_vs_seconds.png: FedAvg against FedBuff in virtual seconds (make.sh's
runs): per method, the server model's test accuracy (``xbar_acc``: the global model on the shared
test set) against virtual seconds and against client updates (uploads the server used: FedAvg's
participants, FedBuff's buffer per step); seconds and updates to 85 / 90% (the first evaluation,
every 10 server steps, at or above; mean over the seeds that reached it, "k/3" when not all did);
the final accuracy and the run's virtual seconds. Read from each run's summary.json and metrics.csv.

    python results/timed_fl_cpu/table.py SWEEP_ROOT --out results/timed_fl_cpu
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

TARGETS = (85, 90)


def runs(root: Path) -> list[dict]:
    out = []
    for summ in sorted(root.rglob("summary.json")):
        s = json.loads(summ.read_text())
        c, m = s["config"], pd.read_csv(summ.parent / "metrics.csv")
        per_step = c["algorithm"]["buffer"] if s["method"] == "fedbuff" else round(c["engine"]["participation"] * s["n_clients"])
        m["updates"] = m["round"] * per_step
        out.append({"method": s["method"], "seed": c["seed"], "metrics": m, "seconds": s["clock"]["virtual_seconds"],
                    "wall": s["wall_seconds"]})
    return out


def first(m: pd.DataFrame, col: str, p: float) -> float:
    hit = m[m.xbar_acc >= p / 100]
    return float(hit[col].iloc[0]) if len(hit) else np.nan


def cell(vals: list[float], fmt: str) -> str:
    ok = [v for v in vals if np.isfinite(v)]
    if not ok:
        return f"0/{len(vals)}"
    text = format(np.mean(ok), fmt)
    return text if len(ok) == len(vals) else f"{text} ({len(ok)}/{len(vals)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    rs = runs(a.root)
    rows, lines = [], ["| method | seeds | " + " | ".join(f"s to {p}%" for p in TARGETS) + " | "
                       + " | ".join(f"updates to {p}%" for p in TARGETS)
                       + " | final acc | virtual s | wall s a run |", "|" + "---|" * (5 + 2 * len(TARGETS))]
    for method in sorted({r["method"] for r in rs}):
        mine = [r for r in rs if r["method"] == method]
        for r in mine:
            rows.append({"method": method, "seed": r["seed"], "final_acc": float(r["metrics"].xbar_acc.iloc[-1]),
                         "virtual_seconds": r["seconds"], "wall_seconds": r["wall"],
                         **{f"s_to_{p}": first(r["metrics"], "seconds", p) for p in TARGETS},
                         **{f"updates_to_{p}": first(r["metrics"], "updates", p) for p in TARGETS}})
        lines.append(f"| {method} | {len(mine)} | "
                     + " | ".join(cell([first(r["metrics"], "seconds", p) for r in mine], ".1f") for p in TARGETS) + " | "
                     + " | ".join(cell([first(r["metrics"], "updates", p) for r in mine], ".0f") for p in TARGETS)
                     + f" | {np.mean([r['metrics'].xbar_acc.iloc[-1] for r in mine]):.1%}"
                     + f" | {np.mean([r['seconds'] for r in mine]):.1f} | {np.mean([r['wall'] for r in mine]):.1f} |")
    a.out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(a.out / "table.csv", index=False)
    (a.out / "table.md").write_text("\n".join(lines) + "\n")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    colors = {"fedavg": "tab:blue", "fedbuff": "tab:red"}
    for r in rs:
        m, c = r["metrics"], colors.get(r["method"], "k")
        label = r["method"] if r["seed"] == 0 else None
        axes[0].plot(m.seconds, m.xbar_acc, color=c, alpha=0.8, label=label)
        axes[1].plot(m.updates, m.xbar_acc, color=c, alpha=0.8, label=label)
    for ax, x in zip(axes, ("virtual seconds", "client updates used by the server")):
        ax.set_xlabel(x)
        ax.set_ylabel("server model test accuracy")
        ax.set_ylim(0.5, 1.0)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("FedAvg vs FedBuff, 100 clients, lognormal devices (sigma 1), 3 seeds")
    fig.tight_layout()
    fig.savefig(a.out / "accuracy_vs_seconds.png", dpi=120)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
