"""The character LSTM (issue 57; vecgossip/models/char_lstm.py): one training step (forward,
backward, SGD) of N nodes, batched over the stacked parameters against a fair per-node loop (one
plain CharLSTM per node with torch's nn.LSTM, oneDNN on the CPU, cuDNN on a GPU, and
torch.optim.SGD with foreach), on the same minibatches, measured side by side.

    python benchmarks/char_lstm.py --n 8 32 --hidden 64 256 --batch 10 --reps 3

speedup = loop time / batched time (> 1: the batched step is faster).
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from common import emit, header, interleaved, summary
from vecgossip.models.char_lstm import CharLSTM, batched_forward


def sides(n: int, hidden: int, batch: int, seq: int = 80):
    g = torch.Generator().manual_seed(0)
    nets = [CharLSTM(hidden=hidden) for _ in range(n)]
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, foreach=True) for m in nets]
    stacked = {k: torch.stack([dict(m.named_parameters())[k].detach().clone() for m in nets]).requires_grad_()
               for k, _ in nets[0].named_parameters()}
    x = torch.randint(0, 80, (n, batch, seq), generator=g)
    y = torch.randint(0, 80, (n, batch), generator=g)

    def batched():
        for p in stacked.values():
            p.grad = None
        loss = F.cross_entropy(batched_forward(stacked, x).reshape(n * batch, -1), y.reshape(-1), reduction="sum") / batch
        loss.backward()
        with torch.no_grad():
            for p in stacked.values():
                p.sub_(0.1 * p.grad)

    def loop():
        for i, (m, o) in enumerate(zip(nets, opts)):
            o.zero_grad()
            F.cross_entropy(m(x[i]), y[i]).backward()
            o.step()
    return {"batched": batched, "loop": loop}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--hidden", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    print(header("char LSTM training step: batched over nodes vs a per-node nn.LSTM loop"))
    rows = []
    for hidden in a.hidden:
        for n in a.n:
            t = interleaved(sides(n, hidden, a.batch), reps=a.reps)
            emit(rows, {"hidden": hidden, "n": n, "batch": a.batch, "batched_ms": 1e3 * t["batched"]["median"],
                        "loop_ms": 1e3 * t["loop"]["median"],
                        "speedup": t["loop"]["median"] / t["batched"]["median"]})
    summary(rows, "median of the reps; speedup = loop / batched")


if __name__ == "__main__":
    main()
