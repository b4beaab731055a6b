"""One client's local step, alone: the engine's path as ``model.exec=auto`` picks it (per client
for ResNet-18 / VGG-11 on a CPU; :func:`vecgossip.core.optim.local_step` on one row of the stacked state) against the fair loop's two
variants (benchmarks/loop.py: parameters as views of one flat NCHW buffer, or modules converted to
channels-last), on the same minibatch, interleaved. It isolates the step from the round around it
(sampling, gossip), which is what explains a round's remaining gap (results/exec_cpu/README.md).

    python benchmarks/client_step.py [--model vgg11] [--batch 32] [--reps 15] [--method dfedavgm|dfedsam]
"""
from __future__ import annotations

import argparse

import torch

from common import apply_malloc, emit, header, interleaved, malloc_option, summary
from rounds import setup
from vecgossip.core.optim import local_step


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="vgg11")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--methods", nargs="+", default=["dfedavgm", "dfedsam"], choices=["dfedavgm", "dfedsam"])
    malloc_option(ap)
    a = ap.parse_args()
    malloc = apply_malloc(a.malloc)
    print(header(f"one client step: engine per client vs the loop ({a.model}, batch {a.batch})", "cpu", malloc))
    rows = []
    for method in a.methods:
        _, loops, impl, eng = setup(3, a.model, a.batch, 1, method, exec_mode="auto")
        st, opt = eng.state, eng.opt
        x, y, w = eng.sampler.next(torch.arange(3)).materialise(eng.train_data, 0, 1)
        flat, modules = loops["loop_flat"].clients, loops["loop_modules"].clients
        fns = {"engine": lambda: local_step(eng.forward, st.layout, st.theta[:1], st.momentum[:1], x, y, w, 0.01, opt),
               "loop_flat": lambda: flat.step(0, x[0], y[0]),
               "loop_modules": lambda: modules.step(0, x[0], y[0])}
        t = interleaved(fns, reps=a.reps, warmup=3, rotate=True)
        inner = getattr(eng.forward.paths["per_client"], "__wrapped__", eng.forward.paths["per_client"])
        emit(rows, {"method": method, "exec": eng.execution.train, "inputs": "channels_last" if inner.channels_last else "nchw", "loop_sgd": impl,
                    **{f"{k}_ms": 1e3 * v["median"] for k, v in t.items()},
                    **{f"{k}_min_ms": 1e3 * v["min"] for k, v in t.items()},
                    "vs_flat": t["loop_flat"]["median"] / t["engine"]["median"],
                    "vs_modules": t["loop_modules"]["median"] / t["engine"]["median"]})
    summary(rows, "ms per client step, median of the interleaved repetitions (and min); vs_* = loop / engine")
    layout_cost(eng, a.reps)


def layout_cost(eng, reps: int) -> None:
    """What the stacked state's NCHW conv weights cost against channels-last gradients: torch's
    fused SGD update of the model's conv weights with gradients in the layout a channels-last
    step returns them in, against contiguous ones (the loop's channels-last modules have both in
    one layout)."""
    kw = dict(weight_decay=5e-4, momentum=0.9, lr=0.01, dampening=0.0, nesterov=False, maximize=False,
              is_first_step=False)
    shapes = [s.shape for s in eng.layout.specs if len(s.shape) == 4]
    ws, vs = [torch.randn(s) for s in shapes], [torch.zeros(s) for s in shapes]
    cl = [torch.randn(s).contiguous(memory_format=torch.channels_last) for s in shapes]
    nchw = [g.contiguous() for g in cl]
    t = interleaved({"channels_last_grads": lambda: torch._fused_sgd_(ws, cl, vs, **kw),
                     "contiguous_grads": lambda: torch._fused_sgd_(ws, nchw, vs, **kw)}, reps=reps, warmup=2)
    print(f"fused SGD of the {len(shapes)} conv weights ({sum(torch.Size(s).numel() for s in shapes) / 1e6:.1f} M), "
          + ", ".join(f"{k} {1e3 * v['median']:.2f} ms" for k, v in t.items()), flush=True)


if __name__ == "__main__":
    main()
