"""Byzantine-robust gossip's table and figure from round-engine runs with an adversary (issue 37;
part of ``python -m vecgossip.report``), written when some run has Byzantine clients:

  byzantine.csv/.md  final honest accuracy (mean local-test accuracy over the honest clients, and
                     the worst honest client's) of each rule under each attack, one table per
                     topology (and per other option that differs), mean +- std over seeds; attack
                     ``none`` is the same setting without Byzantine clients
  byzantine.png      the same as grouped bars: one panel per topology, one group per attack ("div":
                     every seed diverged)
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from vecgossip.core.files import atomic_path

ATTACKS = ("none", "sign_flip", "gaussian", "alie", "ipm", "dissensus", "label_flip", "mimic")
RULES = ("dpsgd", "dfedavg", "clipped_gossip", "trimmed_mean", "median", "balance", "gossip", "vc", "robust_gossip")
KEYS = ["topology", "rule", "method", "attack", "byzantine", "setting"]


def _order(values, known) -> list:
    seen = list(dict.fromkeys(values))
    return [v for v in known if v in seen] + [v for v in seen if v not in known]


def rules_in(g: pd.DataFrame) -> list:
    """The rules of a group, the built-in order of their methods first, each method's settings in
    the order they came."""
    methods = _order(g.method, RULES)
    return [r for m in methods for r in dict.fromkeys(g.rule[g.method == m])]


def table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (topology, rule (the method and its algorithm.* options), attack, Byzantine count,
    other options): honest accuracy (%)
    mean and std over seeds, the worst honest client's, the seeds."""
    df = runs.copy()
    split = [[o for o in o_.split(", ") if o and not o.startswith("seed=")] for o_ in df.options.fillna("")]
    opts = [[o for o in os_ if not o.startswith("adversary.")] for os_ in split]
    # the attack's own options (adversary.epsilon, .z, .sigma, a user's attack's) name its column: never pooled;
    # adversary.attack and adversary.nodes are the table's own keys (attack, byzantine)
    adv = [[o.removeprefix("adversary.") for o in os_ if o.startswith("adversary.")
            and not o.startswith(("adversary.attack=", "adversary.nodes="))] for os_ in split]
    df["attack"] = [a + (f" ({', '.join(x)})" if x else "") for a, x in zip(df.attack, adv)]
    df["setting"] = [", ".join(o for o in os_ if not o.startswith("algorithm.")) for os_ in opts]
    own = [", ".join(o.removeprefix("algorithm.") for o in os_ if o.startswith("algorithm.")) for os_ in opts]
    df["rule"] = [m + (f" ({o})" if o else "") for m, o in zip(df.method, own)]     # e.g. clipped_gossip (tau=0.1)
    rows = []
    for key, g in df.groupby(KEYS, sort=False):
        ok = g[g.diverged_round.isna()]                  # a diverged run has no final accuracy
        acc, worst = 100 * ok.acc_mean, 100 * ok.acc_min
        rows.append(dict(zip(KEYS, key), acc=acc.mean(), acc_std=acc.std(ddof=1) if len(ok) > 1 else np.nan,
                         worst=worst.mean(), seeds=len(g), clients=int(g.clients.iloc[0]),
                         diverged=int(g.diverged_round.notna().sum())))
    return pd.DataFrame(rows)


def markdown(t: pd.DataFrame, noun: str = "clients") -> str:
    """``noun``: what the engine's participants are called (round engine: clients; tick: nodes)."""
    one = noun.removesuffix("s")
    test = "local-test" if noun == "clients" else "test"
    out = ["# Byzantine-robust gossip: honest accuracy (%)", "",
           f"Final mean {test} accuracy over the honest {noun} (Byzantine {noun} are left out of every "
           f"metric), mean ± std over seeds; in brackets the worst honest {one}'s (mean over seeds). "
           f"Attack `none`: the same setting without Byzantine {noun}. \"diverged\": honest models became "
           "non-finite and the run stopped (on_divergence=stop); the mean is over the runs that did not.", ""]
    for (topo, setting), g in t.groupby(["topology", "setting"], sort=False):
        byz = sorted(set(g.byzantine) - {0})
        out += [f"## {topo}, {g.clients.iloc[0]} {noun}, {', '.join(map(str, byz)) or 0} Byzantine"
                + (f"; {setting}" if setting else ""), ""]
        attacks = _order(g.attack, ATTACKS)
        out += ["| rule | " + " | ".join(attacks) + " |", "|---|" + "---|" * len(attacks)]
        for m in rules_in(g):
            cells = []
            for a in attacks:
                r = g[(g.rule == m) & (g.attack == a)]
                if r.empty:
                    cells.append("")
                    continue
                r = r.iloc[0]
                sd = f" ± {r.acc_std:.1f}" if r.acc_std == r.acc_std else ""
                cells.append(("diverged" if r.diverged == r.seeds else f"{r.acc:.1f}{sd} [{r.worst:.1f}]"
                              + (f" ({r.diverged} diverged)" if r.diverged else ""))
                             + (f" (n={r.seeds})" if r.seeds != 3 else ""))
            out.append(f"| {m} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out) + "\n"


def plot(t: pd.DataFrame, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(t.groupby(["topology", "setting"], sort=False))
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 3.6 * len(panels)), squeeze=False)
    for ax, ((topo, setting), g) in zip(axes[:, 0], panels):
        attacks, rules = _order(g.attack, ATTACKS), rules_in(g)
        width = 0.8 / len(rules)
        for k, m in enumerate(rules):
            rows = [g[(g.rule == m) & (g.attack == a)] for a in attacks]
            acc = [(0.0 if r.diverged.iloc[0] == r.seeds.iloc[0] else r.acc.iloc[0]) if len(r) else np.nan
                   for r in rows]                                        # every seed diverged: a zero bar
            sd = [r.acc_std.iloc[0] if len(r) else np.nan for r in rows]
            x = np.arange(len(attacks)) + (k - (len(rules) - 1) / 2) * width
            ax.bar(x, acc, width, yerr=np.nan_to_num(sd), capsize=2, label=m, color=plt.get_cmap("tab10")(k))
            for xi, r in zip(x, rows):
                if len(r) and r.diverged.iloc[0] == r.seeds.iloc[0]:
                    ax.text(xi, 2, "div", rotation=90, ha="center", va="bottom", fontsize=7)
        ax.set_xticks(np.arange(len(attacks)), attacks)
        ax.set_ylim(0, 100)
        ax.set_ylabel("honest accuracy (%)")
        ax.set_title(f"{topo}" + (f" ({setting})" if setting else ""), fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    axes[0, 0].legend(fontsize=8, ncol=min(6, len(set(t.rule))), loc="lower left", bbox_to_anchor=(0, 1.08))
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)


def report(out: Path, runs: pd.DataFrame, noun: str = "clients") -> str:
    """byzantine.csv/.md/.png when some run has Byzantine clients (or nodes: ``noun``); returns the
    markdown ('' if none)."""
    if runs.empty or not (runs.byzantine > 0).any():
        return ""
    t = table(runs)
    md = markdown(t, noun)
    with atomic_path(out / "byzantine.csv") as tmp:
        t.to_csv(tmp, index=False)
    with atomic_path(out / "byzantine.md") as tmp:
        tmp.write_text(md)
    plot(t, out / "byzantine.png")
    return md
