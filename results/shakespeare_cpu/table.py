"""table.md / table.csv / curves.png for make.sh's Shakespeare runs (issue 57).

Part 1, the FedAvg paper's finding: for FedAvg and FedSGD on the role split (non-IID) and the IID
deal, the rounds until the server model's accuracy over every test character (``xbar_acc``: the
global model on all test windows of the 20 roles) first reaches each target (the first
evaluation at or above it; mean over the seeds that reached it, "k/n" when not all did), and the
ratio FedSGD / FedAvg beside the paper's own (Table 2, Shakespeare LSTM to 54%).

Part 2, decentralized methods on the role split: final accuracy averaged per node (``acc_mean``:
each node's model on its own test windows) and over all characters (``acc_chars``), mean and
standard deviation over seeds 0, 1, 2, and the local steps a node took until the mean per-node
accuracy first reached each of DEC_TARGETS (lower: 500 steps a node only just leave the 19% of
always answering a space). Dotted lines in the plot: the targets.

    python results/shakespeare_cpu/table.py SWEEP_ROOT --out results/shakespeare_cpu
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

TARGETS = (0.25, 0.30, 0.35)
DEC_TARGETS = (0.20, 0.22, 0.24)   # 500 local steps: just past the 19% of always answering a space
PAPER = {"roles": (3906, 41), "iid": (2488, 41)}   # McMahan et al. 2017, Table 2: FedSGD, best FedAvg rounds to 54%


def load(root: Path) -> list[dict]:
    """One entry per run (a replica batch gives one per replica), from summary.json and metrics.csv."""
    out = []
    for summ in sorted(root.rglob("summary.json")):
        if (summ.parent / "replica0").exists():          # the batch's top level: its replicas are read
            continue
        s = json.loads(summ.read_text())
        c = s["config"]
        kind = summ.parent.parent.name if summ.parent.name.startswith("replica") else summ.parent.name
        m = pd.read_csv(summ.parent / "metrics.csv")
        step = "round" if "round" in m else "tick"
        local = c["engine"].get("local_steps") or 1
        m["steps"] = m[step] * (local if s["engine"] == "rounds" else 1)
        out.append({"kind": kind, "seed": c["seed"], "engine": s["engine"], "metrics": m, "step": step,
                    "wall": s["wall_seconds"]})
    return out


def first(m: pd.DataFrame, col: str, at: str, target: float) -> float:
    hit = m[m[col] >= target]
    return float(hit[at].iloc[0]) if len(hit) else np.nan


def cell(vals: list[float], fmt: str = ".0f") -> str:
    ok = [v for v in vals if np.isfinite(v)]
    if not ok:
        return f"0/{len(vals)}"
    text = format(np.mean(ok), fmt)
    return text if len(ok) == len(vals) else f"{text} ({len(ok)}/{len(vals)})"


def server_part(rs: list[dict], rows: list[dict]) -> list[str]:
    lines = ["## 1. FedAvg against FedSGD (server model, accuracy over all test characters)", "",
             "| split | method | seeds | " + " | ".join(f"rounds to {t:.0%}" for t in TARGETS)
             + " | final acc | wall s (replicas: their batch) |", "|" + "---|" * (5 + len(TARGETS))]
    for split in ("roles", "iid"):
        for method in ("fedavg", "fedsgd"):
            mine = [r for r in rs if r["kind"] == f"{method}_{split}"]
            if not mine:
                continue
            for r in mine:
                rows.append({"part": "server", "split": split, "method": method, "seed": r["seed"],
                             "final_acc": float(r["metrics"].xbar_acc.iloc[-1]), "wall_seconds": r["wall"],
                             **{f"rounds_to_{t}": first(r["metrics"], "xbar_acc", "round", t) for t in TARGETS}})
            lines.append(f"| {split} | {method} | {len(mine)} | "
                         + " | ".join(cell([first(r["metrics"], "xbar_acc", "round", t) for r in mine]) for t in TARGETS)
                         + f" | {np.mean([r['metrics'].xbar_acc.iloc[-1] for r in mine]):.1%}"
                         + f" | {np.mean([r['wall'] for r in mine]):.0f} |")
    lines += ["", "| split | target | FedSGD / FedAvg rounds (ours) | the paper's (to 54%, Table 2) |", "|---|---|---|---|"]
    for split in ("roles", "iid"):
        sgd = [r for r in rs if r["kind"] == f"fedsgd_{split}"]
        avg = [r for r in rs if r["kind"] == f"fedavg_{split}"]
        if not (sgd and avg):
            continue
        paper = PAPER[split]
        for t in TARGETS:
            a = np.nanmean([first(r["metrics"], "xbar_acc", "round", t) for r in avg] or [np.nan])
            s = np.nanmean([first(r["metrics"], "xbar_acc", "round", t) for r in sgd] or [np.nan])
            ours = f"{s:.0f} / {a:.0f} = {s / a:.1f}x" if np.isfinite(a) and np.isfinite(s) else (
                f"FedSGD did not reach it in {int(sgd[0]['metrics']['round'].iloc[-1])} rounds (> {sgd[0]['metrics']['round'].iloc[-1] / a:.0f}x)"
                if np.isfinite(a) else "FedAvg did not reach it")
            lines.append(f"| {split} | {t:.0%} | {ours} | {paper[0]} / {paper[1]} = {paper[0] / paper[1]:.1f}x |")
    return lines


def decentralized_part(rs: list[dict], rows: list[dict]) -> list[str]:
    lines = ["", "## 2. Decentralized methods on the role split (each node on its own test windows)", "",
             "| method | seeds | local steps a node | acc per node (mean +- sd) | acc over all characters | "
             + " | ".join(f"steps to {t:.0%}" for t in DEC_TARGETS) + " | wall s (the batch of seeds) |", "|" + "---|" * (6 + len(DEC_TARGETS))]
    for kind in ("dpsgd_ring", "dpsgd_exponential", "gossip", "vc"):
        mine = [r for r in rs if r["kind"] == kind]
        if not mine:
            continue
        acc = [float(r["metrics"].acc_mean.iloc[-1]) for r in mine]
        chars = [float(r["metrics"].acc_chars.iloc[-1]) for r in mine]
        for r, a, ch in zip(mine, acc, chars):
            rows.append({"part": "decentralized", "split": "roles", "method": kind, "seed": r["seed"],
                         "final_acc": a, "final_acc_chars": ch, "wall_seconds": r["wall"],
                         **{f"steps_to_{t}": first(r["metrics"], "acc_mean", "steps", t) for t in DEC_TARGETS}})
        lines.append(f"| {kind} | {len(mine)} | {int(mine[0]['metrics'].steps.iloc[-1]) + (mine[0]['step'] == 'tick')} | "
                     f"{np.mean(acc):.1%} +- {np.std(acc):.1%} | {np.mean(chars):.1%} +- {np.std(chars):.1%} | "
                     + " | ".join(cell([first(r["metrics"], "acc_mean", "steps", t) for r in mine]) for t in DEC_TARGETS)
                     + f" | {np.mean([r['wall'] for r in mine]):.0f} |")
    return lines


def plot(rs: list[dict], out: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    style = {"fedavg_roles": ("tab:blue", "-"), "fedavg_iid": ("tab:blue", "--"), "fedsgd_roles": ("tab:red", "-"),
             "fedsgd_iid": ("tab:red", "--"), "dpsgd_ring": ("tab:orange", "-"), "dpsgd_exponential": ("tab:green", "-"),
             "gossip": ("tab:purple", "-"), "vc": ("tab:brown", "-")}
    seen = set()
    for r in rs:
        c, ls = style.get(r["kind"], ("k", ":"))
        label = None if r["kind"] in seen else r["kind"].replace("_roles", " (non-IID roles)").replace("_iid", " (IID)")
        seen.add(r["kind"])
        m = r["metrics"]
        if r["kind"].startswith(("fedavg", "fedsgd")):
            axes[0].plot(m["round"].clip(lower=1), m.xbar_acc, color=c, ls=ls, alpha=0.8, label=label)
        else:
            axes[1].plot(m.steps, m.acc_mean, color=c, ls=ls, alpha=0.8, label=label)
    for t in TARGETS:
        axes[0].axhline(t, color="gray", ls=":", lw=0.8)
    for t in DEC_TARGETS:
        axes[1].axhline(t, color="gray", ls=":", lw=0.8)
    axes[0].set(xscale="log", xlabel="communication rounds (log)", ylabel="server model: accuracy over all test characters",
                title="FedAvg (50 local steps) vs FedSGD (1 step), 20 roles")
    axes[1].set(xlabel="local steps a node", ylabel="accuracy per node (own test windows)",
                title="decentralized, role split, seeds 0-2")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    rs = load(a.root)
    rows: list[dict] = []
    lines = server_part(rs, rows) + decentralized_part(rs, rows)
    a.out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(a.out / "table.csv", index=False)
    (a.out / "table.md").write_text("\n".join(lines) + "\n")
    plot(rs, a.out)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
