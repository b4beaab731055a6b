"""Host cost of the virtual clock (issues 48, 56): seconds of wall time to time one barrier round
(vecgossip/engines/clock/rounds.py) of a random k-regular graph, every node sending the MNIST MLP
(203,560 bytes) to its k neighbours, compute lognormal around 50 ms, latency 1 ms, under two link
settings: every uplink 60 Mbit/s, and DivShare's (7 in 60 nodes at 10-13 Mbit/s, the rest 60),
for each sharing policy asked (fair: exact max-min, incremental, the compiled event loop; fifo;
greedy: sacs-epfl's simulator's scheduler, a Python event loop). The cost is the event simulation
on the host, independent of the model's training; each (nodes, links, policy) is timed after one
warm-up round (numba compiles once), ``--repeat`` times, the median reported.

    python benchmarks/clock_rounds.py --nodes 60 200 1000 --policies fair fifo greedy --out results/clock_policies_cpu/rounds.json
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from vecgossip.core.files import write_json
from vecgossip.engines.clock.config import ClockConfig, timer
from vecgossip.network.topology import build

MLP_BYTES = 50_890 * 4


def adjacency(n: int, k: int, seed: int) -> sp.csr_matrix:
    e = build("regular", n, k, seed=seed).edges
    rows, cols = np.r_[e[:, 0], e[:, 1]], np.r_[e[:, 1], e[:, 0]]
    return sp.coo_matrix((np.ones(rows.size), (rows, cols)), shape=(n, n)).tocsr()


def settings(n: int) -> dict:
    slow = round(7 * n / 60)
    return {"uniform_60": 60.0,
            "divshare": [{"nodes": n - slow, "mbps": 60.0}, {"nodes": slow, "mbps": (10.0, 13.0)}]}


def one(n: int, seed: int, w, name: str, up, policy: str, args) -> dict:
    """One (nodes, seed, links, policy): the round's virtual seconds and its median host seconds."""
    cfg = ClockConfig(enabled=True, policy=policy, links={"uplink": up, "latency": 0.001},
                      compute={"model": "lognormal", "seconds": 0.05})
    tm = timer(cfg, n, 32, seed)
    virtual = tm.round(np.ones(n), w, MLP_BYTES)                  # warm-up (numba compiles once)
    walls = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        assert tm.round(np.ones(n), w, MLP_BYTES) == virtual
        walls.append(time.perf_counter() - t0)
    wall = float(np.median(walls))
    print(f"n={n:6d} seed={seed} {name:11s} {policy:6s} {w.nnz:7d} messages: a round of {virtual:.6f} virtual s "
          f"took {wall:.3f} s on the host", flush=True)
    return {"nodes": n, "seed": seed, "degree": args.degree, "links": name, "policy": policy, "messages": int(w.nnz),
            "virtual_seconds": virtual, "host_seconds": wall, "host_seconds_all": walls}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[60, 200])
    ap.add_argument("--degree", type=int, default=6)
    ap.add_argument("--policies", nargs="+", default=["fair"], choices=["fair", "fifo", "greedy"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0], help="graph and link draws")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows = []
    for n in args.nodes:
        for seed in args.seeds:
            w = adjacency(n, args.degree, seed)
            for name, up in settings(n).items():
                for policy in args.policies:
                    rows.append(one(n, seed, w, name, up, policy, args))
    if args.out is not None:
        write_rows("clock_rounds.py", args, rows)


def write_rows(script: str, args, rows: list[dict]) -> None:
    """``args.out``: the rows, the command that made them (every option as given) and the machine."""
    write_json({"command": f"python benchmarks/{script} " + " ".join(
                    f"--{k} {' '.join(map(str, v)) if isinstance(v, list) else v}"
                    for k, v in vars(args).items() if v is not None),
                "machine": platform.processor() or platform.machine(), "rows": rows}, args.out)


if __name__ == "__main__":
    main()
