"""AD-PSGD (Lian et al. 2018) on the tick clock, node by node: every due node computes its
gradient at the model it reads; then, in node order, each averages with a uniformly drawn
neighbour (conflict-free batches of pairs; under faults each direction of an exchange is a
message that may be lost, one fate per link and tick); then its Caffe SGD step (momentum,
weight decay, inv lr of its own step count, bias lr x2)."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from conftest import faults_of
from vecgossip.algorithms import Streams
from vecgossip.algorithms.adpsgd import pair_batches
from vecgossip.core.state import load_flat
from vecgossip.models import build as build_model


def run(cfg, engine, ref, ticks) -> list[torch.Tensor]:
    """``engine``: before it runs (its initial models); ``ref``: a second engine of the same config
    whose draws are replayed; ``ticks``: the training ticks (every node due at each)."""
    layout, data, n, o = engine.layout, engine.train_data, engine.n, cfg.optim
    xs = [engine.state.theta[i].clone() for i in range(n)]
    vs = [torch.zeros_like(xs[0]) for _ in range(n)]
    iters = [0] * n
    rng = Streams.of(int(cfg.seed)).numpy
    faults = faults_of(cfg, n)
    peers = [np.flatnonzero(ref.a_full.toarray()[:, i]) for i in range(n)]
    bias = torch.cat([torch.full((s.stop - s.start,), o.bias_lr_mult if s.is_bias else 1.0, dtype=torch.float64)
                      for s in layout.specs])
    net = build_model("mlp", data.shape, data.num_classes).double()
    for t in ticks:
        online = faults.online(t) if faults else np.ones(n, dtype=bool)
        due = np.flatnonzero(online)
        _, images, _ = ref.draw(due)
        grads = []
        for r, i in enumerate(due):
            load_flat(net, layout, xs[i])
            x, y = data.train_batch(images[r:r + 1], None)
            net.zero_grad()
            F.cross_entropy(net(x[0]), y[0]).backward()
            grads.append(torch.cat([p.grad.flatten() for p in net.parameters()]))
        pairs = [(int(i), int(peers[i][rng.integers(peers[i].size)])) for i in due]
        exchange(xs, pairs, peers, faults, online, {})
        for r, i in enumerate(due):
            lr = o.lr * (1 + o.gamma * iters[i]) ** (-o.power)
            vs[i] = o.momentum * vs[i] + lr * bias * (grads[r] + o.weight_decay * xs[i])
            xs[i] = xs[i] - vs[i]
            iters[i] += 1
    return xs


def exchange(xs, pairs, peers, faults, online, fates: dict) -> None:
    """The pairwise averages, batch by conflict-free batch, in place. ``fates``: the tick's
    message fates, {(receiver, sender): arrived}: a link's fate is drawn the first time the tick
    uses it and holds for the rest of the tick (one fate per message and tick)."""
    for batch in pair_batches(pairs):
        for i, j in batch:
            assert i != j and j in peers[i]
        arrived = {}
        for a in sorted(v for pair in batch for v in pair):      # receivers ascending: one draw each
            b = next(q for pair in batch for q in pair if a in pair and q != a)
            if (a, b) not in fates:
                fates[(a, b)] = True if faults is None else bool(faults.kept(1)[0])
            arrived[a] = fates[(a, b)] and online[a] and online[b]
        for i, j in batch:
            xi, xj = xs[i], xs[j]
            xs[i] = (xi + xj) / 2 if arrived[i] else xi
            xs[j] = (xi + xj) / 2 if arrived[j] else xj
