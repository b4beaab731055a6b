"""The gather service against ``mix`` (issue 37): one gossip step of m stacked CNN models, side by
side in one run, on the ring and the exponential graph.

    python benchmarks/gather.py [--m 64] [--model cnn] [--budget-mib 64 8] [--reps 7] [--device cpu]

mix: the engine's sparse W x into a new tensor (``mixing_operator`` + ``mix_``, what ``ctx.mix`` runs); gather_sum:
``engines.gather.gather`` with ``Block.weighted_sum`` (each receiver's messages as a (r, d_max, P)
block, in chunks of at most ``budget`` bytes); gather_median / _trimmed / _clipped / _balance: the
same blocks reduced by the built-in robust rules. Both sums agree (checked). Memory: the peak
above the state already held (CUDA: max_memory_allocated; CPU: VmHWM over the resident set before
the call), against the gather's workspace that ``runtime.memory.estimate`` counts for a run that
gathers (``memory.gather_workspace`` with the rule's ``Requires.gather_blocks``). One rule's peak alone:

    python benchmarks/gather.py --memory-of gather_median --topologies complete --m 16 --model lenet --data mnist --malloc default
"""
from __future__ import annotations

import argparse
import subprocess
import sys

import torch

from common import apply_malloc, emit, header, interleaved, malloc_option, summary, sync
from vecgossip.algorithms import Block
from vecgossip.algorithms.clipped_gossip import ClippedGossip
from vecgossip.algorithms.median import Median
from vecgossip.algorithms.balance import Balance
from vecgossip.algorithms.trimmed_mean import TrimmedMean
from vecgossip.core.state import Layout
from vecgossip.data.registry import get_spec
from vecgossip.engines.gather import gather
from vecgossip.models import get_model
from vecgossip.network.mixing import mix_, mixing_operator, uniform_mixing
from vecgossip.network.neighbourhoods import neighbourhoods
from vecgossip.network.topology import build
from vecgossip.runtime import memory
from vecgossip.runtime.shard import Shard


def resident() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


RULES = {"median": Median, "trimmed": TrimmedMean, "clipped": ClippedGossip, "balance": Balance}


def peak_above(f, device: torch.device) -> int:
    """Bytes ``f`` needs above what is held before it (the device's or the process's peak; on the
    CPU measured once in a fresh process, see --memory-of, as an allocator that keeps freed
    memory hides what a call touches)."""
    sync(device)
    if device.type == "cuda":
        base = torch.cuda.memory_allocated(device)
    else:
        base = resident()
    memory.reset_peak(device)
    f()
    sync(device)
    return memory.peak(device) - base


def peak_in_child(name: str, topo: str, a) -> float:
    """MiB: ``name``'s peak above the state, measured in a fresh process (glibc's own malloc)."""
    cmd = [sys.executable, __file__, "--memory-of", name, "--topologies", topo, "--m", str(a.m), "--model", a.model,
           "--data", a.data, "--device", a.device, "--malloc", "default", "--budget-mib", *map(str, a.budget_mib)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return float(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=64)
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--data", default="cifar10")
    ap.add_argument("--topologies", nargs="+", default=["ring", "exponential"])
    ap.add_argument("--budget-mib", type=float, nargs="+", default=[64, 8])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--memory-of", default=None, help=argparse.SUPPRESS)   # internal: one side's peak, printed
    malloc_option(ap)
    a = ap.parse_args()
    device = torch.device(a.device)
    malloc = apply_malloc(a.malloc)
    spec = get_spec(a.data)
    with torch.device("meta"):
        p = Layout.of(get_model(a.model).factory(spec.shape, spec.num_classes)).size
    if a.memory_of is None:
        print(header(f"gather vs mix: one gossip step of {a.m} {a.model} models (P={p:,})", device, malloc))
    x = torch.randn(a.m, p, device=device)
    rows, mems = [], []
    for topo in a.topologies:
        w = uniform_mixing(build(topo, a.m))
        op = mixing_operator(w, device)
        nb = neighbourhoods(w, device=device)
        fns = {"mix": lambda: mix_(torch.empty_like(x), op, x)}
        for mib in a.budget_mib:
            budget = int(mib * (1 << 20))
            fns[f"gather_sum_{mib:g}MiB"] = (lambda b=budget: gather(x, nb, w, Shard(a.m), Block.weighted_sum, budget=b))
        fns["gather_median"] = lambda: gather(x, nb, w, Shard(a.m), Median().aggregate)
        fns["gather_clipped"] = lambda: gather(x, nb, w, Shard(a.m), ClippedGossip().aggregate)
        fns["gather_trimmed"] = lambda: gather(x, nb, w, Shard(a.m), TrimmedMean().aggregate)
        balance = Balance()
        balance.threshold = balance.params.gamma                 # round 0's acceptance radius
        fns["gather_balance"] = lambda: gather(x, nb, w, Shard(a.m), balance.aggregate)
        if a.memory_of is not None:
            print(peak_above(fns[a.memory_of], device) / 2**20)
            return
        want = mix_(torch.empty_like(x), op, x)
        for name, f in fns.items():
            if name.startswith("gather_sum"):
                err = float((f() - want).abs().max() / want.abs().max())
                assert err < 1e-5, (name, err)
        t = interleaved(fns, reps=a.reps, device=device, rotate=True)
        row = {"graph": topo, "d_max": nb.d_max, "mix_ms": 1e3 * t["mix"]["median"]}
        for name in fns:
            if name != "mix":
                row[f"{name}/mix"] = t[name]["median"] / t["mix"]["median"]
        emit(rows, row)
        mem = {"graph": topo, "state_MiB": x.numel() * x.element_size() / 2**20}
        blocks = []
        gather(x, nb, w, Shard(a.m), lambda b: blocks.append(b.msgs.numel() * b.msgs.element_size()) or b.own)
        mem["block_MiB"] = max(blocks) / 2**20                    # the largest block of messages made
        for name, f in fns.items():
            mem[f"{name}_MiB"] = peak_above(f, device) / 2**20 if device.type == "cuda" else peak_in_child(name, topo, a)
        for name, rule in RULES.items():                         # what memory.estimate counts for a run of that rule
            mem[f"counted_{name}_MiB"] = memory.gather_workspace(a.m, nb.d_max, p, x.element_size(),
                                                                 rule.requires.gather_blocks) / 2**20
        emit(mems, mem)
    summary(rows, "time: ratio of medians, > 1: mix is faster")
    summary(mems, "memory, MiB: peak above the state held (CPU: each side once in a fresh process); block: the "
                  "largest block of messages; counted_<rule>: memory.estimate's gather workspace for that rule "
                  "(the result + Requires.gather_blocks blocks)")


if __name__ == "__main__":
    main()
