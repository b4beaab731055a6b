"""Host cost of the virtual clock (issue 48): seconds of wall time to time one barrier round
(vecgossip/engines/clock/rounds.py) of a k-regular graph, every node sending the MNIST MLP
(203,560 bytes) to its k neighbours, compute lognormal around 50 ms, latency 1 ms, under two link
settings: every uplink 60 Mbit/s, and DivShare's (7 in 60 nodes at 10-13 Mbit/s, the rest 60).
The cost is the event simulation on the host (every transfer start and end re-shares the links),
independent of the model's training.

    python benchmarks/clock_rounds.py --nodes 60 200 1000 --degree 6 --out results/clock_speed_cpu/clock_rounds.json
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[60, 200])
    ap.add_argument("--degree", type=int, default=6)
    ap.add_argument("--policy", default="fair", choices=["fair", "fifo"])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows = []
    for n in args.nodes:
        w = adjacency(n, args.degree, 0)
        for name, up in settings(n).items():
            cfg = ClockConfig(enabled=True, policy=args.policy,
                              links={"uplink": up, "latency": 0.001}, compute={"model": "lognormal", "seconds": 0.05})
            tm = timer(cfg, n, 32, 0)
            t0 = time.perf_counter()
            virtual = tm.round(np.ones(n), w, MLP_BYTES)
            wall = time.perf_counter() - t0
            rows.append({"nodes": n, "degree": args.degree, "links": name, "policy": args.policy,
                         "messages": int(w.nnz), "virtual_seconds": virtual, "host_seconds": wall})
            print(f"n={n:5d} {name:11s} {w.nnz:6d} messages: a round of {virtual:.3f} virtual s took "
                  f"{wall:.3f} s on the host", flush=True)
    if args.out is not None:
        write_json({"command": "python benchmarks/clock_rounds.py " + " ".join(
                        f"--{k} {' '.join(map(str, v)) if isinstance(v, list) else v}"
                        for k, v in vars(args).items() if v is not None),
                    "machine": platform.processor() or platform.machine(), "rows": rows}, args.out)


if __name__ == "__main__":
    main()
