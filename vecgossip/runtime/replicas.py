"""``replicas=S``: one config run as S independent simulations in one batch (engines/group.py),
on either engine.

Replica s is the run with ``seed + s``; the options in :data:`PER_REPLICA` may instead be lists of S
values (one per replica, shapes unchanged), so one batch covers a row of a sweep::

    python -m vecgossip replicas=3                      # seeds 0, 1, 2
    python -m vecgossip replicas=3 beta=[0,0.5,0.9] correction=[true,false,false]

A flat two-int ``t_acq=[lo,hi]`` is always one uniform range; per-replica T_acq is a list of S
entries written as ranges or ints, e.g. ``t_acq=[[1,19],10]`` (or ``[5,10,20]`` for S != 2).

Outputs (the run directory): ``replica{s}/`` holds exactly a separate run's files (metrics.csv,
accuracy.npy, ticks.npy / rounds.npy, plots, summary.json with that replica's seed and values),
which the report reads as S runs; the top level holds ``metrics.csv`` (every replica's rows, a
``replica`` column first) and ``summary.json`` (per-replica reach ticks, or final and best
accuracies, with their mean and standard deviation).
"""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from vecgossip.core.errors import ConfigError
from vecgossip.core.files import write_csv, write_json

# per-replica options: the short knob and the group key the engines read
PER_REPLICA = {"alpha": "data.alpha", "beta": "averaging.beta", "correction": "averaging.correction",
               "t_acq": "engine.t_acq", "compression": "averaging.compression", "lr": "optim.lr"}
# per-replica statistics of the aggregate summary.json, per engine (dotted: nested keys)
STATS = {"tick": ("first_reach_tick", "most_reach_tick", "plateau_delay_tick", "ticks_run", "final_acc_mean"),
         "rounds": ("final.acc_mean", "final.acc_min", "final.global_acc_mean", "final.xbar_acc",
                    "final.consensus_distance", "best.acc_mean", "best.xbar_acc", "rounds_run")}


def count(cfg: DictConfig) -> int:
    """``replicas`` (validated already: an int >= 1)."""
    return int(OmegaConf.select(cfg, "replicas", default=1) or 1)


def _per_replica(short: str, v) -> bool:
    """Is ``v`` a list of per-replica values (not the option's own list form)?"""
    if not isinstance(v, (list, tuple, ListConfig)):
        return False
    v = list(v)
    if short == "t_acq":   # [lo, hi] is a range; per replica: S entries, ranges or ints
        flat_range = len(v) == 2 and all(isinstance(x, int) for x in v)
        return not flat_range and all(isinstance(x, (int, list, ListConfig)) for x in v)
    return True


def expand(cfg: DictConfig) -> list[DictConfig]:
    """The S replica configs: seed + s, ``replicas=1``, and the s-th value of every per-replica list."""
    s_count = count(cfg)
    if s_count == 1:
        return [cfg]
    seed = int(OmegaConf.select(cfg, "seed"))
    lists = {}
    for short, key in PER_REPLICA.items():
        v = OmegaConf.select(cfg, key)
        if _per_replica(short, v):
            v = OmegaConf.to_container(v, resolve=True) if isinstance(v, ListConfig) else list(v)
            if len(v) != s_count:
                raise ConfigError(f"{short} ({key}) has {len(v)} values but replicas={s_count}: give one value, "
                                  f"or one per replica")
            lists[key] = (short, v)
    out = []
    for s in range(s_count):
        c = copy.deepcopy(cfg)
        with open_dict(c):
            c.seed, c.replicas = seed + s, 1
            for key, (short, v) in lists.items():
                OmegaConf.update(c, key, v[s], merge=False)
                if short in c and _per_replica(short, OmegaConf.select(c, short)):
                    c[short] = v[s]            # the short knob too, when the list was given there
        out.append(c)
    return out


def aggregate(resolved: dict, summaries: list[dict], wall: float) -> dict:
    """The top-level summary.json: each statistic per replica, with mean and standard deviation
    (ddof 1) over the replicas where it is defined; ``reached`` counts those."""
    out = {"engine": summaries[0]["engine"], "name": summaries[0]["name"], "method": summaries[0]["method"],
           "replicas": len(summaries), "replica_dirs": [f"replica{s}" for s in range(len(summaries))],
           "seeds": [sm["config"]["seed"] for sm in summaries], "nodes": summaries[0].get("n_nodes", summaries[0].get("n_clients")),
           "wall_seconds": round(wall, 3)}
    for key in STATS[out["engine"]]:
        vals = [_get(sm, key) for sm in summaries]
        ok = np.array([v for v in vals if v is not None], dtype=float)
        out[key] = {"values": vals, "defined": int(ok.size),
                    "mean": float(ok.mean()) if ok.size else None,
                    "std": float(ok.std(ddof=1)) if ok.size > 1 else None}
    if any(sm.get("privacy") for sm in summaries):    # each replica's own noise, epsilons and bounds, as its run wrote them
        out["privacy"] = [sm.get("privacy") for sm in summaries]
    out["config"] = resolved
    return out


def _get(d: dict, key: str):
    for part in key.split("."):
        d = d.get(part) if isinstance(d, dict) else None
    return d


def write_outputs(out: Path, rows: list[dict], summary: dict) -> None:
    """Top level: every replica's metrics rows (``replica`` column) and the aggregate summary (last)."""
    write_csv(pd.DataFrame(rows), out / "metrics.csv")
    write_json(summary, out / "summary.json")
