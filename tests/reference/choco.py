"""CHOCO-SGD (Koloskova, Stich, Jaggi 2019, Algorithm 2), node by node: a local SGD step, the
compressed difference q_i = top_k(x_i - x_hat_i) added to the public copy, then the consensus
step x_i += gamma sum_j w_ij (x_hat_j - x_hat_i) over the messages that arrived."""
from __future__ import annotations

import numpy as np
import torch

from reference.common import Twin, ring_w, top_k


def run(cfg, engine, gamma: float, fraction: float) -> list[torch.Tensor]:
    tw = Twin(cfg, engine)
    m, wd = tw.m, tw.o.weight_decay
    k = max(1, round(fraction * engine.layout.size))
    w = ring_w(m)
    xs = [tw.x(i) for i in range(m)]
    xhat = [torch.zeros_like(xs[0]) for _ in range(m)]
    for t in range(cfg.engine.rounds):
        online = tw.faults.online(t) if tw.faults else np.ones(m, dtype=bool)
        g = tw.grads(xs)
        xs = [x - tw.lr(t) * (gi + wd * x) if online[i] else x for i, (x, gi) in enumerate(zip(xs, g))]
        xhat = [h + top_k(x - h, k) if online[i] else h for i, (x, h) in enumerate(zip(xs, xhat))]
        new = []
        for i in range(m):
            acc = xs[i].clone()
            for j in range(m):                                   # row-major: one fault draw per message
                if j != i and w[i, j]:
                    kept = tw.faults is None or bool(tw.faults.kept(1)[0])
                    if kept and online[j] and online[i]:
                        acc = acc + gamma * w[i, j] * (xhat[j] - xhat[i])
            new.append(acc)
        xs = new
    return xs
