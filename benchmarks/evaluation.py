"""Evaluation of every node on the fixed evaluation set (paper 1: 100 images), measured side by side.

    python benchmarks/evaluation.py [--n 50] [--images 100] [--chunks 2 5 10] [--reps 9]

- ``shared``: what ``metrics.evaluate`` does (the images handed over once as
  ``layers.SharedImages``; LeNet's conv1 is one GEMM of their columns against every node's filters);
- ``copies``: the path before it (each node gets its own copy of the images, conv1 grouped), i.e.
  ``metrics.evaluate_per_node`` on the expanded images;
- ``loop``: a per-node loop of ``nn.Module`` LeNets in channels_last, forward + argmax + cross-entropy
  under ``no_grad`` (the fair loop's evaluation);
- ``measure``: the tick engine's whole metrics row (``TickEngine.measure``: the evaluation plus the
  layer variances and weight differences), and its share of a training round (train + send + Eq. 1
  average + correction of ``benchmarks/common.round_parts``; issue 13's goal: <= 25%).
All interleaved in one run; accuracy and loss of ``shared`` and ``copies`` are checked equal.
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from common import apply_malloc, header, interleaved, make_engine, malloc_option, round_parts, table
from vecgossip.core.metrics import evaluate, evaluate_per_node
from vecgossip.models import get_model
from vecgossip.core.state import load_flat


def loop_eval(theta: torch.Tensor, layout, x: torch.Tensor, y: torch.Tensor):
    """Per-node modules (channels_last), weights loaded once: the loop's evaluation."""
    nets = []
    for i in range(theta.shape[0]):
        net = get_model("lenet").factory().to(memory_format=torch.channels_last).eval()
        load_flat(net, layout, theta[i])
        nets.append(net)
    xc = x.contiguous(memory_format=torch.channels_last)

    @torch.no_grad()
    def run():
        for net in nets:
            logits = net(xc)
            _ = (logits.argmax(1) == y).float().mean(), F.cross_entropy(logits, y)   # what evaluate computes
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--images", type=int, default=100)
    ap.add_argument("--chunks", type=int, nargs="+", default=[2, 5, 10], help="nodes per evaluation chunk")
    ap.add_argument("--reps", type=int, default=9)
    malloc_option(ap)
    a = ap.parse_args()
    malloc = apply_malloc(a.malloc)
    print(header(f"evaluation of {a.n} LeNets on {a.images} shared images", "cpu", malloc), flush=True)
    eng = make_engine(a.n, a.k, "lenet", "cpu")
    x, y = eng.train_data.batch(torch.arange(a.images))
    theta, layout, fwd = eng.state.theta, eng.layout, eng.forward
    fns = {}
    for c in a.chunks:
        fns[f"shared c={c}"] = lambda c=c: evaluate(fwd, layout, theta, x, y, c)
        fns[f"copies c={c}"] = lambda c=c: evaluate_per_node(fwd, layout, theta, x.expand(a.n, *x.shape),
                                                           y.expand(a.n, -1), c)
        acc_s, loss_s = fns[f"shared c={c}"]()
        acc_c, loss_c = fns[f"copies c={c}"]()
        assert torch.equal(acc_s, acc_c) and torch.allclose(loss_s, loss_c, rtol=1e-6, atol=0), c
    fns["loop"] = loop_eval(theta, layout, x, y)
    fns["measure (engine)"] = lambda: eng.measure(0)
    t = interleaved(fns, reps=a.reps)
    parts = round_parts(eng, a.reps, "cpu")
    round_ms = parts["train"] + parts["send"] + parts["average"] + parts["correction"]
    rows = [{"path": k, "ms": 1e3 * v["median"], "min_ms": 1e3 * v["min"],
             "vs_loop": t["loop"]["median"] / v["median"], "share_of_round": 1e3 * v["median"] / round_ms}
            for k, v in t.items()]
    print(f"engine chunk {eng.eval_chunk}; training round {round_ms:.0f} ms (train {parts['train']:.0f}, "
          f"send {parts['send']:.0f}, average {parts['average']:.0f}, correction {parts['correction']:.0f}); "
          f"shared and copies give equal accuracy and loss")
    print(table(rows, ["path", "ms", "min_ms", "vs_loop", "share_of_round"]))


if __name__ == "__main__":
    main()
