"""Training step: vecgossip's batched step (forward + autograd + Caffe SGD for all nodes) vs the
shared fair per-node loop (benchmarks/loop.py: nn.Modules with torch.optim.SGD fused or foreach,
whichever is faster here, Caffe's bias-lr group, default zero_grad, channels_last for conv models)
doing the same math, measured side by side.

    python benchmarks/train_step.py [--n 10 50 200] [--batch 8 64] [--models lenet mlp] [--reps 5]
                                    [--malloc tuned|default]

speedup = loop time / batched time (> 1: vecgossip is faster).
"""
from __future__ import annotations

import argparse

import torch

from common import apply_malloc, emit, header, interleaved, malloc_option, summary
from loop import LoopClients, fastest_sgd
from vecgossip.models import get_model, make_forward
from vecgossip.core.optim import SGDConfig, loss_and_grad, sgd_update
from vecgossip.models.chunks import resolve_chunk
from vecgossip.core.state import Layout, init_theta, new_state


def setup(name: str, n: int, batch: int, device: str, impl: str, chunk: int):
    model = get_model(name)
    layout = Layout.of(model.factory())
    g = torch.Generator().manual_seed(0)
    state = new_state(layout, init_theta(layout, n, "caffe_xavier", g, device=device))
    x = torch.rand(n, batch, 1, 28, 28, generator=g).to(device)
    y = torch.randint(0, 10, (n, batch), generator=g).to(device)
    fwd, cfg = make_forward(name, impl), SGDConfig(lr_policy="fixed")

    def batched():  # what TickEngine.train does: the step in chunks of `chunk` nodes
        for lo in range(0, n, chunk):
            sl = slice(lo, lo + chunk)
            _, grads = loss_and_grad(fwd, layout, state.theta[sl], x[sl], y[sl])
            sgd_update(state.theta[sl], state.momentum[sl], grads, state.iters[sl], layout, cfg)

    # the shared fair loop (benchmarks/loop.py): fused or foreach SGD, whichever is faster here, the
    # same bias-lr group as Caffe, default zero_grad, channels_last for conv models
    conv = name != "mlp"
    impl, _ = fastest_sgd(model.factory, x[0], y[0], 0.9, conv, bias_lr_mult=2.0)
    clients = LoopClients(model.factory, state.theta.clone(), 0.01, 0.9, 5e-4, impl, conv, bias_lr_mult=2.0)

    def loop():
        for i in range(n):
            clients.step(i, x[i], y[i])

    return batched, loop, impl


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[10, 50, 200])
    ap.add_argument("--batch", type=int, nargs="+", default=[8, 64])
    ap.add_argument("--models", nargs="+", default=["lenet", "mlp"])
    ap.add_argument("--impl", nargs="+", default=["explicit", "vmap"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--chunk", default="auto", help="nodes per chunk: auto (the engine's default) or an int")
    malloc_option(ap)
    a = ap.parse_args()
    malloc = apply_malloc(a.malloc)
    print(header(f"training step: batched (chunk={a.chunk}: the engine's default) vs per-node loop", a.device,
                 malloc))
    rows = []
    for name in a.models:
        for batch in a.batch:
            for n in a.n:
                fns = {}
                chunk = resolve_chunk(a.chunk, torch.device(a.device), batch, name)
                for impl in a.impl:
                    fns[impl], loop, sgd = setup(name, n, batch, a.device, impl, chunk)
                fns["loop"] = loop
                t = interleaved(fns, reps=a.reps, device=a.device)
                row = {"model": name, "batch": batch, "N": n, "chunk": chunk, "loop_sgd": sgd,
                       "loop_ms": 1e3 * t["loop"]["median"]}
                for impl in a.impl:
                    row[f"{impl}_ms"] = 1e3 * t[impl]["median"]
                    row[f"{impl}_speedup"] = t["loop"]["median"] / t[impl]["median"]
                    row[f"{impl}_speedup_min"] = t["loop"]["min"] / t[impl]["min"]
                emit(rows, row)
    summary(rows, "speedup = loop / batched, median; _min = ratio of minima")


if __name__ == "__main__":
    main()
