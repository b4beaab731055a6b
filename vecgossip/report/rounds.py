"""Paper 2's tables and figures from round-engine runs (part of ``python -m vecgossip.report``).

  rounds.csv         one tidy row per round run (method, topology, scale, seed, final/best accuracy,
                     consensus distance, spectral gap, wall time)
  dfl_topology.csv/.md  the paper's topology table: final local-test accuracy (%) of each method on
                     each topology, mean +- std over seeds, beside the paper's CIFAR-10 numbers, one
                     table per scale (clients, rounds, local steps, batch, model, data, partition)
  dfl_accuracy.png, dfl_consensus.png   mean local-test accuracy and consensus distance over rounds
  dfl_bytes.png      accuracy (local, and of x_bar) against the bytes each client sent: the point of
                     compressed gossip (CHOCO-SGD) is accuracy per byte
  dfl_time.png       mean local-test accuracy against virtual seconds (runs with clock.enabled)
  dfl_time.md/.csv   their seconds to 50 / 70 / 90% mean accuracy per group (report/time.py)
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from vecgossip.report.grouping import add_option_column
from vecgossip.core.files import atomic_path
from vecgossip.runtime.outputs import found
from vecgossip.report.paper import PAPER2_SCALE, PAPER2_TOPOLOGY

METHODS = ("dpsgd", "dsgdm", "dfedavg", "dfedavgm", "dfedsam", "dfedsam_mgs", "choco", "gradient_tracking", "qgdsgdm",
           "sgp", "el_local", "el_oracle", "fedavg", "fedsam")
TOPOLOGIES = ("ring", "grid", "exponential", "complete", "random", "regular", "star", "server", "directed_ring",
              "one_peer_exponential", "random_out")
SCALE = ["clients", "rounds", "batch", "model", "data", "partition"]   # D-PSGD's K = 1 is its method


def round_row(root: Path, summ: Path, s: dict) -> dict:
    c = s["config"]
    e = c["engine"]
    local = f"K={e['local_steps']}" if e.get("local_steps") is not None else f"E={e['local_epochs']}"
    part = s.get("partition") + (f" {s['alpha']:g}" if s.get("alpha") is not None else "")
    return {
        "run_dir": str(summ.parent.relative_to(root)) or ".", "name": s.get("name"), "method": s["method"],
        "topology": s["topology"], "clients": s["n_clients"], "rounds": s["rounds_run"], "local": local,
        "batch": c["data"]["batch_size"], "model": s["model"], "data": s["data"], "partition": part,
        "gossip_steps": e["gossip_steps"], "momentum": c["optim"]["momentum"], "rho": c["optim"].get("rho"),
        "sam": c["optim"].get("sam"), "seed": c["seed"],
        "acc_mean": s["final"]["acc_mean"], "acc_min": s["final"]["acc_min"],
        "global_acc_mean": s["final"]["global_acc_mean"], "xbar_acc": s["final"]["xbar_acc"],
        "consensus_distance": s["final"]["consensus_distance"], "best_acc_mean": s["best"]["acc_mean"],
        "spectral_gap": s.get("spectral_gap"), "bytes_per_client": s.get("bytes_cumulative_per_client"),
        "wall_seconds": s["wall_seconds"],
        "attack": (s.get("adversary") or {}).get("attack", "none"),
        "diverged_round": (s.get("diverged") or {}).get("round"),       # on_divergence=stop: where it stopped
        "byzantine": len((s.get("adversary") or {}).get("byzantine", [])),
        "seconds_per_round": s.get("seconds_per_round"),
        **clock_fields(s.get("clock")),
        **privacy_fields(s.get("privacy")),
    }


def clock_fields(c: dict | None) -> dict:
    """A timed run's (clock.enabled) virtual seconds in all and to 50 / 70 / 90% mean accuracy;
    NaN for an untimed run or a target not reached."""
    c, nan = c or {}, float("nan")
    hit = c.get("seconds_to_acc_mean") or {}
    return {"virtual_seconds": c.get("virtual_seconds", nan),
            **{f"seconds_to_{p}": nan if hit.get(f"{p}%") is None else hit[f"{p}%"] for p in (50, 70, 90)}}


def privacy_fields(p: dict | None) -> dict:
    """A private run's noise, epsilon and (Muffliato's) network bound; NaN for a non-private one."""
    p, net = p or {}, (p or {}).get("network") or {}
    nan = float("nan")
    return {"noise_multiplier": p.get("noise_multiplier", nan), "clip": p.get("clip", nan),
            "epsilon": (p.get("epsilon") or {}).get("max", nan), "delta": p.get("delta", nan),
            "epsilon_pair_mean": net.get("epsilon_pair_mean", nan), "epsilon_pair_max": net.get("epsilon_pair_max", nan),
            "epsilon_local_unamplified": net.get("epsilon_local_unamplified", nan)}


def load_round_runs(root: Path, within: list[Path] | None = None) -> pd.DataFrame:
    """One row per round run; ``options`` names the options beyond a table cell's (scale, method,
    topology) that differ between runs (grouping.py): seeds are pooled only when all else is equal."""
    rows, configs = [], []
    for summ in found(root, "summary.json", within):
        s = json.loads(summ.read_text())
        if s.get("engine") == "rounds" and s.get("replicas", 1) == 1:   # a replica batch: its replica*/ runs
            rows.append(round_row(root, summ, s))
            configs.append(s["config"])
    df = pd.DataFrame(rows)
    add_option_column(df, configs, SCALE + ["method", "topology"])
    if not df.empty:     # an algorithm's own hyperparameters name its method ("choco[fraction=0.01]")
        algo = [[o for o in opts.split(", ") if o.startswith("algorithm.")] if opts else [] for opts in df.options]
        df["method"] = [m + (f"[{', '.join(o.removeprefix('algorithm.') for o in a)}]" if a else "")
                        for m, a in zip(df.method, algo)]
        df["options"] = [", ".join(o for o in opts.split(", ") if not o.startswith("algorithm.")) if opts else ""
                         for opts in df.options]
    return df


def _pct(values: pd.Series) -> str:
    v = 100 * values.to_numpy()
    return f"{v.mean():.2f}" + (f" ± {v.std(ddof=1):.2f} (n={v.size})" if v.size > 1 else "")


def paper_value(row: dict) -> float | None:
    """The paper's number for a table cell: its CIFAR-10 topology table only (none for CIFAR-100)."""
    cifar10 = str(row["data"]).startswith("CIFAR-10") and not str(row["data"]).startswith("CIFAR-100")
    return PAPER2_TOPOLOGY.get((row["method"], row["topology"])) if cifar10 else None


def topology_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Tidy: one row per (scale, method, topology) with our mean/std/seeds and the paper's value."""
    keys = SCALE + ["options", "method", "topology"]
    rows = []
    for key, g in runs.groupby(keys, sort=False):
        row = dict(zip(keys, key))
        acc = 100 * g.acc_mean
        row.update(local=", ".join(sorted(set(g.local))), seeds=len(g), acc_mean=acc.mean(), acc_std=acc.std(ddof=1) if len(g) > 1 else np.nan,
                   xbar_acc=100 * g.xbar_acc.mean(), consensus_distance=g.consensus_distance.mean(),
                   spectral_gap=g.spectral_gap.mean(), paper=paper_value(row),
                   megabytes_per_client=g.bytes_per_client.mean() / 1e6,
                   wall_seconds=g.wall_seconds.mean())
        rows.append(row)
    return pd.DataFrame(rows)


def _order(values, known) -> list:
    base = lambda v: str(v).split("[")[0]  # noqa: E731  (a method named with its hyperparameters)
    return sorted(set(values), key=lambda v: (known.index(base(v)) if base(v) in known else len(known), str(v)))


def mgs_vs_sam(root: Path, runs: pd.DataFrame) -> list[str]:
    """Paper 2's claim on every topology with both: DFedSAM-MGS's consensus distance below
    DFedSAM's at every evaluated round (seed by seed), and its final accuracy above."""
    lines = []
    for (_, topo), g in runs.groupby([runs[SCALE + ["options"]].astype(str).agg("|".join, axis=1), "topology"]):
        sam, mgs = g[g.method == "dfedsam"], g[g.method == "dfedsam_mgs"]
        for seed in sorted(set(sam.seed) & set(mgs.seed)):
            a = pd.read_csv(root / sam[sam.seed == seed].run_dir.iloc[0] / "metrics.csv")
            b = pd.read_csv(root / mgs[mgs.seed == seed].run_dir.iloc[0] / "metrics.csv")
            both = a.merge(b, on="round", suffixes=("_sam", "_mgs"))
            both = both[both["round"] > 0]
            if not (both[["consensus_distance_sam", "consensus_distance_mgs"]] > 1e-9).any().any():
                continue        # complete graph: both at float noise, nothing to compare
            below = int((both.consensus_distance_mgs < both.consensus_distance_sam).sum())
            last = both.iloc[-1]
            lines.append(f"- {topo}, seed {seed}: MGS consensus distance below SAM's at {below} of {len(both)} "
                         f"evaluated rounds; final local-test accuracy MGS {100 * last.acc_mean_mgs:.2f} vs SAM "
                         f"{100 * last.acc_mean_sam:.2f}; x_bar MGS {100 * last.xbar_acc_mgs:.2f} vs SAM "
                         f"{100 * last.xbar_acc_sam:.2f}")
    return lines


def topology_markdown(table: pd.DataFrame, root: Path, runs: pd.DataFrame) -> str:
    text = runs["partition"].astype(str).str.startswith(("roles", "iid deal")).any()
    ours = ("final mean local-test accuracy over clients (each client on test images following its own "
            "label mix" + ("; on text, each client on all its own test windows" if text else "")
            + "), mean ± std over seeds")
    if table.paper.notna().any():          # a CIFAR-10 run of paper 2's methods: beside the paper's numbers
        out = ["# Paper 2: test accuracy (%) by topology", "",
               f"Ours: {ours}; / paper's CIFAR-10 number ({PAPER2_SCALE}). The scales differ: compare orderings, "
               "not values.", ""]
    else:                                  # another data set or method: no paper number to compare with
        out = ["# Test accuracy (%) by topology", "", f"{ours[0].upper()}{ours[1:]}.", ""]
    for scale, g in table.groupby(SCALE + ["options"], sort=False):
        s = dict(zip(SCALE + ["options"], scale))
        local = ", ".join(sorted(set(g.local)))
        out += [f"## {s['clients']} clients, {s['rounds']} rounds, batch {s['batch']} ({local} local steps per "
                f"round), {s['model']}, {s['data']}, {s['partition']}" + (f"; {s['options']}" if s["options"] else ""),
                ""]
        topos = _order(g.topology, TOPOLOGIES)
        out += ["| method | " + " | ".join(topos) + " |", "|---|" + "---|" * len(topos)]
        for m in _order(g.method, METHODS):
            cells = []
            for t in topos:
                r = g[(g.method == m) & (g.topology == t)]
                if r.empty:
                    cells.append("not run" if (m, t) in PAPER2_TOPOLOGY else "")
                    continue
                r = r.iloc[0]
                ours = f"{r.acc_mean:.2f}" + (f" ± {r.acc_std:.2f} (n={r.seeds})" if r.seeds > 1 else "")
                cells.append(ours + (f" / {r.paper:.2f}" if r.paper == r.paper and r.paper is not None else ""))
            out.append(f"| {m} | " + " | ".join(cells) + " |")
        out += ["", "Averaged model x_bar on the whole test set (%), final consensus distance "
                "(1/m) sum ||x_i - x_bar||^2, spectral gap 1 - |lambda_2| of W, and the megabytes each client "
                "sent in the whole run:", "",
                "| method | topology | local steps | x_bar acc | consensus distance | spectral gap | MB sent per client "
                "| seeds | s per run |",
                "|---|---|---|---|---|---|---|---|---|"]
        for _, r in g.iterrows():
            gap = "-" if r.spectral_gap != r.spectral_gap else f"{r.spectral_gap:.4f}"
            mb = "-" if r.megabytes_per_client != r.megabytes_per_client else f"{r.megabytes_per_client:.4g}"
            out.append(f"| {r.method} | {r.topology} | {r.local} | {r.xbar_acc:.2f} | {r.consensus_distance:.4g} | "
                       f"{gap} | {mb} | {r.seeds} | {r.wall_seconds:.0f} |")
        out.append("")
    claims = mgs_vs_sam(root, runs)
    if claims:
        out += ["## DFedSAM-MGS vs DFedSAM (paper: MGS more consistent, and more accurate on the ring)", ""] + claims
    return "\n".join(out) + "\n"


def plot_curves(root: Path, runs: pd.DataFrame, out: Path) -> None:
    """dfl_accuracy.png, dfl_consensus.png and dfl_bytes.png: one line per (method, topology,
    options), mean over seeds."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = {}
    for (m, t, o), g in runs.groupby(["method", "topology", "options"], sort=False):
        frames = [pd.read_csv(root / d / "metrics.csv").set_index("round") for d in g.run_dir]
        cols = ["acc_mean", "xbar_acc", "consensus_distance", "bytes_cumulative", "seconds"]
        curves[(m, t if not o else f"{t} {o}")] = (sum(f.reindex(columns=cols) for f in frames) / len(frames),
                                                   len(frames))      # (older runs lack some columns)
    for col, name, ylabel, log in (("acc_mean", "dfl_accuracy.png", "mean local-test accuracy", False),
                                   ("consensus_distance", "dfl_consensus.png", "consensus distance", True)):
        fig, ax = plt.subplots(figsize=(10, 4.5))
        for (m, t), (df, n) in curves.items():
            ax.plot(df.index, df[col], lw=1.2, **line_style(curves, m, t),
                    label=f"{m} / {t}" + (f" (mean of {n})" if n > 1 else ""))
        ax.set_xlabel("round")
        ax.set_ylabel(ylabel)
        if log and (runs.consensus_distance > 1e-9).any():
            ax.set_yscale("log")     # complete graphs / servers sit at float noise (~1e-12): below the axis
            tops = [float(v) for df, _ in curves.values() for v in [df[col][np.isfinite(df[col])].max()] if v == v]
            if tops:                 # a diverged run's inf is not an axis limit
                ax.set_ylim(bottom=1e-4 * max(tops))
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.tight_layout()
        with atomic_path(out / name) as tmp:
            fig.savefig(tmp, dpi=120, format="png")
        plt.close(fig)
    plot_bytes(curves, out / "dfl_bytes.png")
    plot_time(curves, out / "dfl_time.png")


def plot_time(curves: dict, path: Path) -> None:
    """Mean local-test accuracy against virtual seconds (clock.enabled runs only), one line per
    (method, topology, options): time to accuracy under the clock's compute and links."""
    import matplotlib.pyplot as plt
    timed = {k: v for k, v in curves.items() if v[0]["seconds"].notna().any()}
    if not timed:
        return
    fig, ax = plt.subplots(figsize=(10, 5))
    cmap = plt.get_cmap("tab10" if len(timed) <= 10 else "tab20")
    for i, ((m, t), (df, n)) in enumerate(timed.items()):      # one colour a line: the sweep's settings
        label = f"{m} / {t}"
        ax.plot(df["seconds"], df["acc_mean"], marker=".", ms=4, lw=1.4, color=cmap(i % cmap.N),
                label=label + (f" (mean of {n})" if n > 1 else ""))
    ax.set_xlabel("virtual seconds (clock.*; a mean over seeds at each evaluated round)")
    ax.set_ylabel("mean local-test accuracy")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)


def line_style(curves: dict, method: str, topology: str) -> dict:
    """One colour per method (with its options), one dash pattern per topology, so that 20 lines
    stay tellable apart (matplotlib's default cycle repeats after 10)."""
    import matplotlib.pyplot as plt
    methods = list(dict.fromkeys(m for m, _ in curves))
    topologies = list(dict.fromkeys(t.split(" ")[0] for _, t in curves))
    cmap = plt.get_cmap("tab20" if len(methods) > 10 else "tab10")
    dashes = ["-", "--", ":", "-."]
    return {"color": cmap(methods.index(method) % cmap.N),
            "linestyle": dashes[topologies.index(topology.split(" ")[0]) % len(dashes)]}


def plot_bytes(curves: dict, path: Path) -> None:
    """Mean local-test accuracy and x_bar's accuracy against the cumulative bytes each client sent
    (log scale), one line per (method, topology, options)."""
    import matplotlib.pyplot as plt
    sent = [df for df, _ in curves.values() if (df.bytes_cumulative.fillna(0) > 0).any()]
    if not sent:
        return
    fig, axes = plt.subplots(1, 2, figsize=(14, 4.8), sharex=True)
    for (m, t), (df, n) in curves.items():
        df = df[df.bytes_cumulative > 0]
        for ax, col in zip(axes, ("acc_mean", "xbar_acc")):
            ax.plot(df.bytes_cumulative, df[col], marker=".", ms=3, lw=1.1, **line_style(curves, m, t),
                    label=f"{m} / {t}" + (f" (mean of {n})" if n > 1 else ""))
    for ax, ylabel in zip(axes, ("mean local-test accuracy", "accuracy of x_bar (whole test set)")):
        ax.set_xscale("log")
        ax.set_xlabel("bytes sent per client (cumulative)")
        ax.set_ylabel(ylabel)
    axes[1].legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)
