"""Differential privacy's table and figure from round-engine runs (issue 38; part of
``python -m vecgossip.report``), written when some run trains with DP-SGD (``privacy.*``):

  privacy.csv/.md  final mean local-test accuracy of each method at each noise level (its epsilon
                   at delta, mean over seeds; clipping without noise (sigma 0) and the non-private
                   runs of the same setting as epsilon inf), mean +- std over seeds, one table per topology (and per other option that
                   differs); then, for runs whose summary has Muffliato's pairwise network bound,
                   that bound (mean and worst pair) beside the local epsilon of the same run
  privacy.png      accuracy against epsilon (log scale; clipping alone and no DP as markers at
                   the right), one panel per topology, one line per method
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from vecgossip.core.files import atomic_path

KEYS = ["topology", "scale", "setting", "method", "run", "noise_multiplier"]
NO_DP = -1.0      # the noise_multiplier column's value for a run without DP-SGD


def table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (topology, scale, other options, method, its rounds x local steps and gossip
    steps, noise multiplier): accuracy (%) mean and std over seeds, epsilon (mean over seeds of the
    worst client's), the network bound's means. Methods that reach the same private steps in
    different rounds (D-PSGD's 500 x 1, DFedAvg's 100 x 5) share a table; seeds are pooled only
    within one row."""
    df = runs.copy()
    df["scale"] = [f"{c} clients, {m}, {d}, {p}, batch {b}" for c, m, d, p, b in
                   zip(df.clients, df.model, df.data, df.partition, df.batch)]
    df["run"] = [f"{r} rounds × {k}" + (f", {q} gossip steps" if q != 1 else "") for r, k, q in
                 zip(df.rounds, df.local, df.gossip_steps)]
    df["setting"] = [", ".join(o for o in (opts or "").split(", ")     # noise_multiplier is a key; clip, delta,
                               if o and not o.startswith(("privacy.noise_multiplier=", "seed=")))   # ... split
                     for opts in df.options.fillna("")]
    df["noise_multiplier"] = df.noise_multiplier.fillna(NO_DP)     # the non-private run; 0: clipping alone
    rows = []
    for key, g in df.groupby(KEYS, sort=False):
        acc = 100 * g.acc_mean
        rows.append(dict(zip(KEYS, key), label=f"{key[3]} ({key[4]})", acc=acc.mean(), acc_std=acc.std(ddof=1) if len(g) > 1 else np.nan,
                         worst=100 * g.acc_min.mean(), seeds=len(g), clients=int(g.clients.iloc[0]),
                         epsilon=g.epsilon.mean() if key[-1] > 0 else np.inf,
                         epsilon_pair_mean=g.epsilon_pair_mean.mean(), epsilon_pair_max=g.epsilon_pair_max.mean(),
                         epsilon_local_unamplified=g.epsilon_local_unamplified.mean(),
                         gossip_steps=int(g.gossip_steps.iloc[0]), rounds=int(g.rounds.iloc[0]), local=g.local.iloc[0]))
    return pd.DataFrame(rows)


def _eps(e: float) -> str:
    return "∞" if not np.isfinite(e) else f"{e:.2f}"


def markdown(t: pd.DataFrame) -> str:
    out = ["# Differential privacy: accuracy against epsilon (%)", "",
           "Final mean local-test accuracy over the clients, mean ± std over seeds; in brackets the worst "
           "client's (mean over seeds). Columns: the DP-SGD noise multiplier sigma and the epsilon it gave "
           "(each client's at the configured delta by Opacus's accountant, the worst client's, mean over "
           "seeds); σ=0: per-sample clipping without noise (epsilon ∞), what clipping alone costs; no DP: "
           "the same setting without DP-SGD.", ""]
    for (topo, scale, setting), g in t.groupby(["topology", "scale", "setting"], sort=False):
        out += [f"## {topo}, {scale}" + (f"; {setting}" if setting else ""), ""]
        noise = set(g.noise_multiplier)                 # strongest privacy first, then clipping alone, then none
        levels = sorted((s for s in noise if s > 0), reverse=True) + [s for s in (0.0, NO_DP) if s in noise]
        head = [f"σ={s:g}" if s > 0 else "σ=0 (clipping alone)" if s == 0 else "no DP" for s in levels]
        out += ["| method (rounds × local steps) | " + " | ".join(head) + " |", "|---|" + "---|" * len(levels)]
        for m in dict.fromkeys(g.label):
            cells = []
            for s in levels:
                r = g[(g.label == m) & (g.noise_multiplier == s)]
                if r.empty:
                    cells.append("")
                    continue
                r = r.iloc[0]
                sd = f" ± {r.acc_std:.1f}" if r.acc_std == r.acc_std else ""
                cells.append(f"ε={_eps(r.epsilon)}: {r.acc:.1f}{sd} [{r.worst:.1f}]" + (f" (n={r.seeds})" if r.seeds != 3 else ""))
            out.append(f"| {m} | " + " | ".join(cells) + " |")
        out.append("")
    net = t[t.epsilon_pair_mean.notna()].sort_values(["topology", "method", "rounds", "noise_multiplier"],
                                                     ascending=[False, True, True, False])
    if not net.empty:
        out += ["## Pairwise network DP beside local DP", "",
                "The same runs' noise seen two ways: epsilon of one client's data against the whole output "
                "(local DP: with subsampling amplification, Opacus; without it, what the network bound is "
                "compared with), and against a single other client u -> v that sees only what reaches it "
                "through the gossip: its neighbours' messages and its own model at every gossip step, as one "
                "linear Gaussian mechanism composed over the rounds (vecgossip/privacy/network.py; at most the "
                "local bound without subsampling; mean and worst pair). Mean over seeds.", "",
                "| topology | method | σ | rounds × gossip steps | local ε (subsampled) | local ε (no subsampling) "
                "| network ε, mean pair | network ε, worst pair | accuracy (%) |", "|---|---|---|---|---|---|---|---|---|"]
        for _, r in net.iterrows():
            out.append(f"| {r.topology} | {r.method} | {r.noise_multiplier:g} | {r.rounds} × {r.gossip_steps} | "
                       f"{r.epsilon:.2f} | {r.epsilon_local_unamplified:.1f} | {r.epsilon_pair_mean:.1f} | "
                       f"{r.epsilon_pair_max:.1f} | {r.acc:.1f} |")
        out.append("")
    return "\n".join(out) + "\n"


def plot(t: pd.DataFrame, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(t.groupby(["topology", "scale", "setting"], sort=False))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False, sharey=True)
    finite = t.epsilon[np.isfinite(t.epsilon)]
    inf_x = 3 * finite.max() if len(finite) else 1.0
    for ax, ((topo, scale, setting), g) in zip(axes[0], panels):
        for k, m in enumerate(dict.fromkeys(g.label)):
            r = g[g.label == m].sort_values("epsilon")
            colour = plt.get_cmap("tab10")(k)
            dp = r[r.noise_multiplier > 0]
            ax.errorbar(dp.epsilon, dp.acc, yerr=np.nan_to_num(dp.acc_std), marker="o", capsize=3, label=m, color=colour)
            for level, marker in ((0.0, "s"), (NO_DP, "*")):    # at the right: clipping alone, no DP
                e = r[r.noise_multiplier == level]
                if len(e):
                    ax.errorbar([inf_x * (1.0 if level == NO_DP else 0.6)], e.acc, yerr=np.nan_to_num(e.acc_std),
                                marker=marker, markersize=9, capsize=3, color=colour, linestyle="none")
        ax.set_xscale("log")
        ticks = sorted(set(np.round(finite, 1))) + [0.6 * inf_x, inf_x]
        ax.set_xticks(ticks, [f"{x:g}" for x in ticks[:-2]] + ["clip\nonly", "no\nDP"])
        ax.minorticks_off()
        ax.set_xlabel("epsilon at delta 1e-5; ■ clipping alone, ★ no DP")
        ax.set_title(f"{topo}: {scale}" + (f"; {setting}" if setting else ""), fontsize=9)
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("final mean local accuracy (%)")
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)


def report(out: Path, runs: pd.DataFrame) -> str:
    """privacy.csv/.md/.png when some run trains with DP-SGD; returns the markdown ('' if none)."""
    if runs.empty or "noise_multiplier" not in runs or not (runs.noise_multiplier.fillna(0) > 0).any():
        return ""
    t = table(runs)
    md = markdown(t)
    with atomic_path(out / "privacy.csv") as tmp:
        t.to_csv(tmp, index=False)
    with atomic_path(out / "privacy.md") as tmp:
        tmp.write_text(md)
    plot(t, out / "privacy.png")
    return md
