"""Stochastic Gradient Push (Assran et al. 2019), node by node on a directed graph: push-sum
weights P_ij = 1/(out_j + 1) for each arc j -> i and on j's own diagonal; the gradient is taken at
the de-biased z = x / w."""
from __future__ import annotations

import numpy as np
import torch

from reference.common import Twin, mix


def run(cfg, engine, arcs_at) -> list[torch.Tensor]:
    """``arcs_at(t)``: round t's arcs (sender, receiver). Returns the de-biased models z."""
    tw = Twin(cfg, engine)
    m, wd = tw.m, tw.o.weight_decay
    xs = [tw.x(i) for i in range(m)]
    ws = [1.0] * m
    for t in range(cfg.engine.rounds):
        zs = [x / wi for x, wi in zip(xs, ws)]
        g = tw.grads(zs)
        half = [x - tw.lr(t) * (gi + wd * z) for x, gi, z in zip(xs, g, zs)]
        arcs = arcs_at(t)
        out = [sum(1 for a, _ in arcs if a == j) for j in range(m)]
        pm = np.zeros((m, m))
        for j in range(m):
            pm[j, j] = 1 / (out[j] + 1)
        for a, b in arcs:
            pm[b, a] = 1 / (out[a] + 1)
        xs = mix(pm, half)
        ws = [sum(pm[i, j] * ws[j] for j in range(m)) for i in range(m)]
    return [x / wi for x, wi in zip(xs, ws)]
