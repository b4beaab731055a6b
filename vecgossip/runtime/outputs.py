"""Run outputs, written atomically (temp file in the same folder, then os.replace):
metrics.csv, accuracy.npy (+ ticks.npy / rounds.npy), summary.json and PNG plots."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pandas as pd

from vecgossip.core.files import atomic_path


def found(root: Path, name: str, within: list[Path] | None = None) -> list[Path]:
    """Every file or folder ``name`` under ``root`` (or only under the folders ``within``, which lie
    inside ``root``: a report over several sweeps), sorted: how the report finds runs."""
    return sorted(p for d in (within or [root]) for p in Path(d).rglob(name))


def plots(out: Path, jobs: dict) -> list[str]:
    """Run the plotting jobs {file name: callable}; a failing plot is reported (stderr and the
    returned list, which goes into summary.json) instead of losing the run's other outputs."""
    import sys
    errors = []
    for name, job in jobs.items():
        try:
            job()
        except Exception as err:  # noqa: BLE001 - any plotting error must not lose the run
            errors.append(f"{name}: {type(err).__name__}: {err}")
            print(f"vecgossip: warning: could not write {out / name}: {err}", file=sys.stderr)
    return errors


def wrapped(title: str, width: int = 80) -> str:
    """A plot's title on as many lines as it needs (a long run name is not cut at the edge)."""
    return "\n".join(textwrap.wrap(title, width)) if title else ""


def plot_accuracy(df: pd.DataFrame, summary: dict, path: Path, title: str = "") -> None:
    """Accuracy band (min..max over nodes) with the mean, and first/most-reach markers (Fig. 2, 8)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.fill_between(df.tick, df.acc_min, df.acc_max, alpha=0.3, label="min..max over nodes")
    ax.plot(df.tick, df.acc_mean, lw=1.5, label="mean")
    thr = summary.get("threshold", 0.9)
    for key, style, label in (("first_reach_tick", "--", "first reaching"),
                              ("most_reach_tick", ":", "most reaching"),
                              ("plateau_delay_tick", "-.", "plateau delay (Eq. 2)")):
        t = summary.get(key)
        if t is not None:
            ax.axvline(t, ls=style, color="k", lw=1, label=f"{label} {thr:.0%}: {t}" if "reach" in key else f"{label}: {t}")
    ax.set_xlabel("tick")
    res = (summary.get("clock") or {}).get("resolution")
    if res:                                      # in virtual seconds: a tick is a window of res seconds
        ax.secondary_xaxis("top", functions=(lambda t: t * res, lambda s: s / res)).set_xlabel("virtual seconds")
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1)
    ax.set_title(wrapped(title), fontsize=10)
    ax.legend(loc="lower right", fontsize=9)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)


def plot_layers(df: pd.DataFrame, prefix: str, ylabel: str, path: Path, title: str = "",
                initial: dict | None = None) -> None:
    """Per-layer curves over time (Fig. 7 variance, Fig. 2b weight difference), log scale (linear
    when every value is zero, as FedAvg's variance after its first average)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = [c for c in df.columns if c.startswith(prefix)]
    fig, ax = plt.subplots(figsize=(7, 4))
    for c in cols:
        line, = ax.plot(df.tick, df[c], label=c[len(prefix):])
        if initial and c in initial:  # value before tick 0 (initialisation), as a marker at tick 0
            ax.plot([0], [initial[c]], "o", color=line.get_color(), ms=4)
    if cols and bool((df[cols] > 0).to_numpy().any()):   # all zero (FedAvg: every model the same): linear
        ax.set_yscale("log")
    ax.set_xlabel("tick")
    ax.set_ylabel(ylabel)
    ax.set_title(wrapped(title), fontsize=10)
    names = [c[len(prefix):] for c in cols]
    ax.legend(fontsize=9, title=("layer (ip = fully connected: Caffe's inner product)"
                                 if any(n.startswith("ip") for n in names) else "layer"), title_fontsize=9)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)


def _save(fig, path: Path) -> None:
    import matplotlib.pyplot as plt
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)


def plot_rounds(df: pd.DataFrame, out: Path, title: str = "") -> None:
    """Round runs (paper 2): accuracy.png (local-test band min..max over clients with the mean,
    the global-test mean and the averaged model x_bar) and consensus.png (consensus distance)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.fill_between(df["round"], df.acc_min, df.acc_max, alpha=0.25, label="local test: min..max over clients")
    ax.plot(df["round"], df.acc_mean, lw=1.5, label="local test: mean")
    ax.plot(df["round"], df.global_acc_mean, lw=1, ls="--", label="global test: mean over clients")
    ax.plot(df["round"], df.xbar_acc, lw=1, ls=":", label="averaged model x_bar (global test)")
    ax.set_xlabel("round")
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1)
    ax.set_title(wrapped(title), fontsize=10)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, fontsize=9)   # below: off the curves
    _save(fig, out / "accuracy.png")

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(df["round"], df.consensus_distance, lw=1.5)
    if (df.consensus_distance > 0).any():
        ax.set_yscale("log")
    ax.set_xlabel("round")
    ax.set_ylabel("consensus distance")
    ax.set_title(wrapped(title) + "\nconsensus distance = (1/m) sum_i ||x_i - x_bar||^2", fontsize=10)
    _save(fig, out / "consensus.png")
