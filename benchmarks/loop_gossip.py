"""What the per-client loop's gossip costs, written two ways, beside the engine's product.

    python benchmarks/loop_gossip.py [--m 100] [--model cnn] [--topology ring] [--reps 5]

x <- W x over the clients' flattened parameters (m, P), W the Metropolis-Hastings matrix of the
topology (CSR, as ``MixingSchedule.at`` gives it):
- ``fresh``: ``flat.copy_(w @ flat)``, a new (m, P) result every round (what benchmarks/loop.py did
  until 2026-12-01: at the CNN's m = 100 the result is 351 MB, above glibc's mmap threshold even
  when tuned, so every round maps and page-faults it in again);
- ``kept``: ``LoopClients.gossip``, the product into a buffer kept across rounds, then copied back
  (the loop baseline now);
- ``engine``: ``mixing.gossip``, the product into the engine's second state buffer, the two
  swapped (no copy).
Each is timed interleaved (median of ``reps``), with the minor page faults of one call.
"""
from __future__ import annotations

import argparse
import resource

import torch

from common import apply_malloc, header, input_shape, interleaved, malloc_option, table
from loop import LoopClients
from vecgossip.network.mixing import MixingSchedule, gossip
from vecgossip.models import get_model
from vecgossip.core.state import Layout, init_theta
from vecgossip.network.topology import build


def faults(fn) -> int:
    """Minor page faults of one call of fn."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    fn()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=100)
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--topology", default="ring")
    ap.add_argument("--reps", type=int, default=5)
    malloc_option(ap)
    a = ap.parse_args()
    malloc = apply_malloc(a.malloc)
    print(header(f"loop gossip: fresh result vs kept buffer vs engine ({a.model}, m={a.m}, {a.topology})",
                 "cpu", malloc))
    factory = get_model(a.model).factory
    shape = input_shape(a.model)
    layout = Layout.of(factory(shape, 10))
    theta = init_theta(layout, a.m, "torch", torch.Generator().manual_seed(0), shared=False)
    w = MixingSchedule(graph=build(a.topology, a.m), device="cpu").at(0)[0]
    clients = LoopClients(lambda: factory(shape, 10), theta, 0.01, 0.9, 5e-4, "foreach", False, flat=True)
    fresh_flat = theta.clone()
    state = {"x": theta.clone(), "out": torch.empty_like(theta)}

    def fresh():
        fresh_flat.copy_(w @ fresh_flat)

    def engine():
        state["x"], state["out"] = gossip(w, state["x"], scratch=state["out"])

    fns = {"fresh": fresh, "kept": lambda: clients.gossip(w), "engine": engine}
    for _ in range(2):                                       # two rounds each: the three agree
        for f in fns.values():
            f()
    err = max((fresh_flat - clients.flat).abs().max().item(), (fresh_flat - state["x"]).abs().max().item())
    t = interleaved(fns, reps=a.reps)
    mb = theta.numel() * 4 / 2 ** 20
    rows = [{"variant": k, "state_MB": mb, "ms": 1e3 * v["median"], "min_ms": 1e3 * v["min"],
             "minor_faults": faults(fns[k])} for k, v in t.items()]
    print(table(rows, ["variant", "state_MB", "ms", "min_ms", "minor_faults"]))
    print(f"the three variants' models after 2 rounds: max abs difference {err:.1e}")


if __name__ == "__main__":
    main()
