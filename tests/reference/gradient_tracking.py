"""Gradient tracking (DSGT; Pu and Nedic 2021), node by node: y tracks the average gradient,
y_i <- sum_j w_ij y_j + g_i(new) - g_i(old); the model steps along y before (adapt then combine)
or after (combine then adapt) mixing."""
from __future__ import annotations

import torch

from reference.common import Twin, mix, ring_w


def run(cfg, engine, form: str) -> list[torch.Tensor]:
    tw = Twin(cfg, engine)
    m, wd, w = tw.m, tw.o.weight_decay, ring_w(tw.m)
    xs = [tw.x(i) for i in range(m)]
    ys = [torch.zeros_like(xs[0]) for _ in range(m)]
    gs = [torch.zeros_like(xs[0]) for _ in range(m)]
    for t in range(cfg.engine.rounds):
        new_g = [g + wd * x for g, x in zip(tw.grads(xs), xs)]
        ys = [y + ng - g for y, ng, g in zip(ys, new_g, gs)]
        gs = new_g
        lr = tw.lr(t)
        if form == "adapt_then_combine":
            xs = mix(w, [x - lr * y for x, y in zip(xs, ys)])
        else:
            xs = [x - lr * y for x, y in zip(mix(w, xs), ys)]
        ys = mix(w, ys)
    return xs
