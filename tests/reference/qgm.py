"""QG-DSGDm (Lin et al. 2021), node by node: a local step along the quasi-global momentum m_hat,
gossip, then m_hat <- mu m_hat + (1 - mu) (x - x_new) / lr."""
from __future__ import annotations

import torch

from reference.common import Twin, mix, ring_w


def run(cfg, engine, beta: float, mu: float) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(the models, the quasi-global momenta)."""
    tw = Twin(cfg, engine)
    m, wd, w = tw.m, tw.o.weight_decay, ring_w(tw.m)
    xs = [tw.x(i) for i in range(m)]
    mh = [torch.zeros_like(xs[0]) for _ in range(m)]
    for t in range(cfg.engine.rounds):
        lr = tw.lr(t)
        g = tw.grads(xs)
        half = [x - lr * (beta * h + gi + wd * x) for x, h, gi in zip(xs, mh, g)]
        new = mix(w, half)
        mh = [mu * h + (1 - mu) * (x - n) / lr for h, x, n in zip(mh, xs, new)]
        xs = new
    return xs, mh
