"""Epidemic Learning (de Vos et al. 2023), node by node: K local momentum-SGD steps, then every
node averages its own model with the models that arrived from the s senders of round t's matrix
(EL-Local: each node pushes to s random others; EL-Oracle: a random s-regular graph)."""
from __future__ import annotations

import numpy as np
import torch

from reference.common import Twin


def run(tw: Twin, drawn: list, steps: int) -> list[torch.Tensor]:
    """Every round with the matrices the algorithm drew (``drawn``: receiver-by-sender W_t,
    scipy); ``tw``: the twin made from the engine before it ran (its initial models and draws)."""
    xs = [tw.x(i) for i in range(tw.m)]
    vs = [torch.zeros_like(xs[0]) for _ in range(tw.m)]
    for t, w in enumerate(drawn):
        xs = round_(tw, xs, vs, t, w, steps)
    return xs


def round_(tw, xs, vs, t: int, w, steps: int) -> list[torch.Tensor]:
    """Round t of the twin with the drawn matrix ``w``: returns the new models (``vs`` in place)."""
    m, wd, mom = tw.m, tw.o.weight_decay, tw.o.momentum
    a = (w.toarray() > 0).astype(int) - np.eye(m, dtype=int)        # receiver-by-sender
    online = tw.faults.online(t) if tw.faults else np.ones(m, dtype=bool)
    for _ in range(steps):
        g = tw.grads(xs)
        for i in range(m):
            vs[i] = mom * vs[i] + g[i] + wd * xs[i]
            xs[i] = xs[i] - tw.lr(t) * vs[i]
    new = []
    for i in range(m):
        got = [xs[i]]
        for j in range(m):
            if a[i, j]:
                kept = tw.faults is None or bool(tw.faults.kept(1)[0])
                if kept and online[i] and online[j]:
                    got.append(xs[j])
        new.append(sum(got) / len(got))
    return new
