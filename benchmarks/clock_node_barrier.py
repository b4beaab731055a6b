"""Host cost of the per-node barrier (``clock.barrier=node``, issue 56): wall seconds to time
``--rounds`` D-PSGD rounds of a random k-regular graph (the MNIST MLP's 203,560 bytes to each of
k neighbours, lognormal compute around 50 ms, 1 ms latency, DivShare's links: 7 in 60 nodes at
10-13 Mbit/s, the rest 60; max-min fair), with every event (the nodes' and their transfers') in
one compiled call (``NodeBarrier.compiled``, the default) against the event-by-event loop, side by
side: each (nodes, path) after one warm-up run, ``--repeat`` times alternated, the median; both
paths' virtual seconds must agree (1e-12).

    python benchmarks/clock_node_barrier.py --nodes 60 200 1000 --out results/clock_scale_cpu/node_barrier.json
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from clock_rounds import MLP_BYTES, adjacency, settings, write_rows
from vecgossip.engines.clock.barrier import NodeBarrier
from vecgossip.engines.clock.config import ClockConfig, timer


def timed(n: int, w, compiled: bool, rounds: int, seed: int) -> tuple[float, float]:
    """(host seconds, virtual seconds) of ``rounds`` rounds and the drain."""
    cfg = ClockConfig(enabled=True, barrier="node", links={"uplink": settings(n)["divshare"], "latency": 0.001},
                      compute={"model": "lognormal", "seconds": 0.05})
    NodeBarrier.compiled = compiled
    tm = timer(cfg, n, 32, seed)
    t0 = time.perf_counter()
    for _ in range(rounds):
        tm.round(np.ones(n), w, MLP_BYTES)
        tm.end_round()
    tm.drain()
    return time.perf_counter() - t0, float(tm.seconds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[60, 200])
    ap.add_argument("--degree", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows = []
    for n in args.nodes:
        w = adjacency(n, args.degree, 0)
        for compiled in (True, False):
            timed(n, w, compiled, 1, 0)                                   # warm-up (numba compiles once)
        walls = {True: [], False: []}
        virtual = {}
        for _ in range(args.repeat):
            for compiled in (True, False):
                wall, virtual[compiled] = timed(n, w, compiled, args.rounds, 0)
                walls[compiled].append(wall)
        assert abs(virtual[True] - virtual[False]) <= 1e-12 * max(1.0, virtual[False]), virtual
        fast, slow = (float(np.median(walls[c])) for c in (True, False))
        print(f"n={n:5d} {w.nnz:6d} messages a round, {args.rounds} rounds ({virtual[True]:.4f} virtual s): "
              f"compiled {fast:.3f} s, event by event {slow:.3f} s on the host ({slow / fast:.1f}x)", flush=True)
        rows.append({"nodes": n, "messages_per_round": int(w.nnz), "rounds": args.rounds,
                     "virtual_seconds": virtual[True], "host_seconds_compiled": fast, "host_seconds_steps": slow,
                     "speedup": slow / fast, "walls": {str(k): v for k, v in walls.items()}})
    if args.out is not None:
        write_rows("clock_node_barrier.py", args, rows)


if __name__ == "__main__":
    main()
