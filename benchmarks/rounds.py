"""One DFL round (paper 2), batched engine vs the per-client loop, measured side by side.

    python benchmarks/rounds.py [--m 100] [--model cnn] [--batch 128] [--steps 1] [--reps 3] [--warmup 3]
                                [--methods dfedavgm dfedsam] [--exec auto|batched|per_client]
                                [--malloc tuned|default]

A round = K local iterations of every client on its own shard (random crop + flip augmentation,
per-channel normalisation) + one gossip step on a ring. Batched: vecgossip's RoundEngine
(local_train + communicate), its path chosen by ``--exec`` as ``model.exec`` chooses it (auto: one
step of each measured on a probe, cached; the decision and its probe timings are printed). Loop: benchmarks/loop.py, one nn.Module + torch.optim.SGD per client
(fused or foreach, whichever measured faster here), channels_last inputs, SAM written out per client,
the same minibatch indices and crops; two variants (modules in channels_last with gossip on stacked
parameters, or parameters as views of one flat buffer), the faster of which is the baseline.
speedup = loop time / batched time (> 1: vecgossip is faster). Each side is warmed up ``--warmup``
rounds (default 3: after one, VGG-11's engine at m = 8 still mapped in 7,000-25,000 new pages in
5 of its next 6 rounds, up to 5% of a round, the loops' modules none; a run lasts thousands of
rounds; benchmarks/warmup_faults.py), the repetitions rotate the order of the sides, and the
minor page faults of each side's median round are printed (``*_faults``: nonzero means a side was
still growing its heap).
"""
from __future__ import annotations

import argparse

import numpy as np
import torch

from common import apply_malloc, emit, header, interleaved, malloc_option, summary
from loop import LoopClients, fastest_sgd
from vecgossip.models.chunks import resolve_chunk
from vecgossip.data.dataset import Dataset, LabelIndex
from vecgossip.data.registry import CIFAR10_MEAN, CIFAR10_STD
from vecgossip.algorithms.dfedavg import DFedAvg
from vecgossip.engines.rounds.config import RoundOptions
from vecgossip.engines.rounds.engine import RoundEngine
from vecgossip.engines.rounds.measures import EvalSets
from vecgossip.network.mixing import MixingSchedule
from vecgossip.models.execution import ExecForward, cache_key, decide, per_client_forward, train_chunk
from vecgossip.models import autocast_forward, get_model, make_forward
from vecgossip.core.optim import LocalSGDConfig
from vecgossip.data.partition import ClientSampler, iid
from vecgossip.core.state import Layout, init_theta, new_state
from vecgossip.network.topology import build

FWD_MACS = {"cnn": 28 * 28 * 32 * 75 + 10 * 10 * 64 * 800 + 1600 * 512 + 512 * 10}   # per 3x32x32 image
# backward: input and weight gradients of every layer except conv1's input gradient
STEP_MACS = {"cnn": 3 * FWD_MACS["cnn"] - 28 * 28 * 32 * 75}


def synthetic_cifar(n: int) -> Dataset:
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, 3, 32, 32), generator=g, dtype=torch.uint8)
    labels = torch.randint(0, 10, (n,), generator=g)
    std = torch.tensor(CIFAR10_STD)
    return Dataset(images, labels, LabelIndex.of(labels, 10), 1 / (255 * std), -torch.tensor(CIFAR10_MEAN) / std,
                   4, "cifar10", "synthetic")


def setup(m: int, model: str, batch: int, steps: int, method: str, device: str = "cpu", precision: str = "fp32",
          exec_mode: str = "auto"):
    """The engine's round and the two loop variants on ``device`` (gpu_check.py uses it there);
    ``precision`` of the engine's side (bf16: autocast, the vmap path); ``exec_mode``: model.exec."""
    data = synthetic_cifar(m * 2 * batch).to(device)
    part = iid(data.labels.numel(), m, np.random.default_rng(0))
    mdef = get_model(model)
    layout = Layout.of(mdef.factory(data.shape, 10))
    theta = init_theta(layout, m, "torch", torch.Generator().manual_seed(0), shared=True).to(device)
    opt = LocalSGDConfig(lr=0.01, momentum=0.9, sam=method == "dfedsam")
    mixing = MixingSchedule(graph=build("ring", m), device=device)
    zeros = lambda *shape: torch.zeros(*shape, dtype=torch.long, device=device)  # noqa: E731
    forward = ExecForward(make_forward(model, precision=precision),
                          per_client_forward(mdef.factory(data.shape, 10).to("meta")))
    if precision == "bf16":
        forward.paths["per_client"] = autocast_forward(forward.paths["per_client"])
    probe = min(m, 8)                                       # the probe's nodes (the engine probes its chunk, at most 256)
    xp, yp = data.batch(torch.arange(probe * batch, device=device) % data.labels.numel())
    decision = decide(forward, exec_mode, cache_key(model, torch.device(device), batch, precision, None),
                      lambda: (layout, theta[:probe].to(device).clone(), xp.reshape(probe, batch, *xp.shape[1:]),
                               yp.reshape(probe, batch)), mdef.explicit is not None)
    rcfg = RoundOptions(rounds=1, local_steps=steps, local_epochs=None, eval_chunk=256,
                        train_chunk=train_chunk("auto", decision, resolve_chunk("auto", torch.device(device), batch, model)))
    eng = RoundEngine(rcfg, DFedAvg(), new_state(layout, theta.clone()), mixing, forward, opt, data,
                      ClientSampler(part, batch, torch.Generator(device=device).manual_seed(1), data.augment,
                                    device=device),
                      EvalSets(data, zeros(m, 1), zeros(1)), np.random.default_rng(0), execution=decision)
    clients = torch.arange(m, device=device)

    def batched():
        eng.local_train(clients, 0.01)
        eng.communicate(0, clients)

    g = torch.Generator().manual_seed(0)
    x0, y0 = data.train_batch(torch.randint(0, data.labels.numel(), (batch,), generator=g).to(device), None)
    impl, _ = fastest_sgd(lambda: mdef.factory(data.shape, 10), x0, y0, 0.9, channels_last=True)
    w = mixing.at(0)[0]
    loops = {}
    for flat in (False, True):
        clients_ = LoopClients(lambda: mdef.factory(data.shape, 10), theta, 0.01, 0.9, 5e-4, impl,
                               channels_last=True, rho=opt.rho if opt.sam else None, flat=flat)
        sampler = ClientSampler(part, batch, torch.Generator(device=device).manual_seed(1), data.augment,
                                device=device)

        def looped(loop=clients_, sampler=sampler):
            for _ in range(steps):
                b = sampler.next(clients)
                for i in range(m):
                    x, y, _ = b.materialise(data, i, i + 1)
                    loop.step(i, x[0], y[0])
            loop.gossip(w)
        looped.clients = clients_                      # client_step.py and the tests reach the clients here
        loops["loop_flat" if flat else "loop_modules"] = looped
    return batched, loops, impl, eng


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, nargs="+", default=[100])
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=1, help="local iterations per round (K)")
    ap.add_argument("--methods", nargs="+", default=["dfedavgm", "dfedsam"], choices=["dfedavgm", "dfedsam"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=3, help="untimed rounds of each side first")
    ap.add_argument("--exec", dest="exec_mode", default="auto", choices=["auto", "batched", "per_client"],
                    help="the engine's path (model.exec); auto measures once and caches")
    ap.add_argument("--profile", action="store_true",
                    help="after timing, one batched and one loop round under torch.profiler: top ops by self CPU time")
    malloc_option(ap)
    a = ap.parse_args()
    malloc = apply_malloc(a.malloc)
    print(header(f"DFL round: batched engine vs per-client loop ({a.model}, batch {a.batch}, K={a.steps}, ring)",
                 "cpu", malloc))
    rows = []
    for method in a.methods:
        for m in a.m:
            batched, loops, impl, eng = setup(m, a.model, a.batch, a.steps, method, exec_mode=a.exec_mode)
            ex = eng.execution
            print(f"model.exec={a.exec_mode}: {ex.train} ({ex.how}; probe ms per client-step {ex.train_ms}, "
                  f"decided in {ex.seconds} s)", flush=True)
            t = interleaved({"batched": batched, **loops}, reps=a.reps, warmup=a.warmup, rotate=True)
            best = min(loops, key=lambda k: t[k]["median"])        # the faster loop is the baseline
            t["loop"] = t[best]
            passes = 2 if method == "dfedsam" else 1
            flop = 2 * STEP_MACS.get(a.model, 0) * a.batch * m * a.steps * passes
            row = {"method": method, "m": m, "exec": eng.execution.train, "chunk": eng.train_chunk, "loop_sgd": impl,
                   "loop": best.split("_")[1], "loop_modules_ms": 1e3 * t["loop_modules"]["median"],
                   "loop_flat_ms": 1e3 * t["loop_flat"]["median"],
                   "loop_ms": 1e3 * t["loop"]["median"], "batched_ms": 1e3 * t["batched"]["median"],
                   "speedup": t["loop"]["median"] / t["batched"]["median"],
                   "speedup_min": t["loop"]["min"] / t["batched"]["min"],
                   "batched_faults": t["batched"]["faults"], "loop_faults": t["loop"]["faults"],
                   "batched_GFLOPs": flop / t["batched"]["median"] / 1e9 if flop else float("nan"),
                   "loop_GFLOPs": flop / t["loop"]["median"] / 1e9 if flop else float("nan")}
            emit(rows, row)
            if a.profile:
                profile({"batched": batched, best: loops[best]})
    summary(rows, "speedup = loop / batched round, median; _min = ratio of minima; GFLOP/s of the "
                  "training FLOPs (gossip and data excluded)")


def profile(fns: dict, top: int = 8) -> None:
    """Self CPU time of the heaviest ops of one call of each function (what explains a ratio)."""
    import warnings

    from torch.profiler import ProfilerActivity, profile as torch_profile
    for name, fn in fns.items():
        with warnings.catch_warnings(), torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            warnings.simplefilter("ignore")
            fn()
        events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
        total = sum(e.self_cpu_time_total for e in prof.key_averages()) / 1e6
        print(f"profile {name}: {total:.2f} s self CPU in all; top: " + ", ".join(
            f"{e.key} {e.self_cpu_time_total / 1e6:.2f} s ({e.count})" for e in events), flush=True)


if __name__ == "__main__":
    main()
