"""How many rounds a side of benchmarks/rounds.py needs before it stops mapping in new memory.

    python benchmarks/warmup_faults.py [--model vgg11] [--method dfedavgm] [--rounds 10] [--m 8] [--batch 32]

Counts the minor page faults (getrusage, every thread) of each round of the engine and the loop's
two variants (rounds.setup, K = 1), interleaved in a fixed order and then rotated
(a cyclic Latin square), the engine alone, and the cost of one fault here (a fresh 256 MB buffer
filled, against a kept one: the difference per page). Counts, not times: they do not depend on
what else runs on the machine. results/exec_cpu/README.md explains why rounds.py warms up 3 rounds.
"""
from __future__ import annotations

import argparse
import time

import torch

from common import apply_malloc, header, interleaved


def per_round(fns: dict, rounds: int, rotate: bool) -> dict[str, list[int]]:
    """Each side's minor page faults in each of ``rounds`` rounds after one warm-up round each
    (what rounds.py did before it warmed up 3), interleaved as rounds.py interleaves them."""
    t = interleaved(fns, reps=rounds, warmup=1, rotate=rotate)
    return {k: v["faults_each"] for k, v in t.items()}


def fault_cost(mb: int = 256, reps: int = 3) -> float:
    """Microseconds per minor fault: filling a fresh buffer minus filling a kept one, per 4 KiB page."""
    kept = torch.empty(mb << 18)
    kept.fill_(1.0)
    fresh, warm = [], []
    for _ in range(reps):
        t = time.perf_counter()
        torch.empty(mb << 18).fill_(1.0)
        fresh.append(time.perf_counter() - t)
        t = time.perf_counter()
        kept.fill_(1.0)
        warm.append(time.perf_counter() - t)
    return 1e6 * (min(fresh) - min(warm)) / (mb << 8)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="vgg11")
    ap.add_argument("--method", default="dfedavgm", choices=["dfedavgm", "dfedsam"])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--m", type=int, default=8)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--fault-mb", type=int, default=256, help="buffer size for the cost of one fault")
    a = ap.parse_args()
    malloc = apply_malloc("tuned")
    print(header(f"minor page faults per round after one warm-up round ({a.model}, m = {a.m}, batch {a.batch}, "
                 f"{a.method})",
                 "cpu", malloc))
    from rounds import setup
    for label, rotate in (("fixed order", False), ("rotated order", True)):
        batched, loops, _, _ = setup(a.m, a.model, a.batch, 1, a.method, exec_mode="auto")
        counts = per_round({"engine": batched, **loops}, a.rounds, rotate)
        for k, v in counts.items():
            print(f"{label:14s} {k:13s} " + " ".join(f"{x:6d}" for x in v), flush=True)
    batched, _, _, _ = setup(a.m, a.model, a.batch, 1, a.method, exec_mode="auto")
    alone = per_round({"engine": batched}, a.rounds, False)["engine"]
    print(f"{'alone':14s} {'engine':13s} " + " ".join(f"{x:6d}" for x in alone))
    print(f"one minor fault here: {fault_cost(a.fault_mb):.2f} us (fresh {a.fault_mb} MB buffer filled minus a "
          "kept one, per page)")


if __name__ == "__main__":
    main()
