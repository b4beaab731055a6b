"""Gossip learning on the tick clock (Tian et al., Algorithm 2 with Eq. 1; Algorithm 3's variance
correction), node by node with plain modules: every T_acq ticks a node takes one Caffe SGD step
(momentum, weight decay, inv lr of its own step count, bias lr x2), sends its fresh model to its
neighbours' buffers (lists of flat copies), and a node whose buffer holds R x its degree models
merges them by Eq. 1, theta <- beta theta + (1 - beta) mean(buffer), then (correction) rescales
every layer's weights to the buffer's mean per-layer variance, keeping the layer's mean."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from vecgossip.core.state import Layout, flatten, load_flat
from vecgossip.data.sampling import sample_node_batches
from vecgossip.models import get_model


def run(init, graph, data, probs, cfg, R: int, seed: int, ticks: int, faults=None, private=None):
    """Reference: one nn.Module per node, buffers as lists of flat model copies. With ``faults`` (a
    Faults seeded like the engine's): offline nodes skip their slot, messages (in sender, receiver
    order) reach online receivers unless dropped, buffers held ``cfg.timeout`` ticks average.
    ``private`` (clip, sigma, run seed): DP-SGD's gradient (reference.dp.private_grad: torch.func
    per-sample gradients, clipped, the node's noise stream at its step count) in the Caffe step."""
    N = graph.n
    model = get_model("mlp")
    layout = Layout.of(model.factory())
    nets = []
    for i in range(N):
        net = model.factory().to(init.dtype)
        load_flat(net, layout, init[i])
        nets.append(net)
    vel = [{n: torch.zeros_like(p) for n, p in net.named_parameters()} for net in nets]
    iters = [0] * N
    nbrs = [sorted(graph.to_networkx().neighbors(i)) for i in range(N)]
    buffers = [[] for _ in range(N)]
    since = [0] * N
    next_train = [0] * N
    gen, rng = torch.Generator().manual_seed(seed), np.random.default_rng(seed)
    lo, hi = cfg.t_acq
    for t in range(ticks):
        due = [i for i in range(N) if next_train[i] == t]
        if not due:
            continue
        online = [True] * N
        if faults is not None:
            online = faults.online(t).tolist()
            skip = [i for i in due if not online[i]]
            steps = [lo] * len(skip) if lo == hi else faults.rng.integers(lo, hi + 1, size=len(skip)).tolist()
            for i, s in zip(skip, steps):
                next_train[i] += s
            due = [i for i in due if online[i]]
            if not due:
                continue
        x, y = sample_node_batches(data, None if probs is None else probs[due], len(due), cfg.batch_size, gen)
        for j, i in enumerate(due):                                 # 1. train
            net = nets[i]
            net.zero_grad()
            if private is None:
                F.cross_entropy(net(x[j]), y[j]).backward()
            else:
                from reference.dp import private_grad
                private_grad(net, layout, x[j], y[j], *private[:2], private[2], i, iters[i])
            caffe_step(net, vel[i], iters[i])
            iters[i] += 1
        step = [lo] * len(due) if lo == hi else rng.integers(lo, hi + 1, size=len(due)).tolist()
        for i, s in zip(due, step):
            next_train[i] += s
        for i in due:                                                # 2. send
            for r in nbrs[i]:
                arrives = True
                if faults is not None:
                    arrives = bool(faults.kept(1)[0]) and online[r]
                if arrives:
                    if not buffers[r]:
                        since[r] = t
                    buffers[r].append(flatten(nets[i]).clone())
        for i in range(N):                                           # 3. average
            full = len(buffers[i]) >= R * len(nbrs[i])
            if faults is not None:
                full = online[i] and (full or t - since[i] >= cfg.timeout)
            if buffers[i] and full:
                merge(nets[i], buffers[i], cfg, layout)
                buffers[i] = []
    return torch.stack([flatten(net) for net in nets]), iters


def caffe_step(net, vel: dict, it: int) -> None:
    """One Caffe SGD step from the gradients in ``net``: momentum 0.9, weight decay 5e-4, the inv
    lr policy at the node's step count ``it``, bias lr x2 (``vel``: the node's momentum buffers)."""
    lr = 0.01 * (1 + 1e-4 * it) ** -0.75
    with torch.no_grad():
        for n, p in net.named_parameters():
            mult = 2.0 if n.endswith("bias") else 1.0
            vel[n] = 0.9 * vel[n] + lr * mult * (p.grad + 5e-4 * p)
            p -= vel[n]


def merge(net, buffer: list, cfg, layout) -> None:
    """Eq. 1, theta <- beta theta + (1 - beta) mean(buffer), then (cfg.correction) Algorithm 3:
    every layer's weights rescaled to the buffer's mean per-layer variance, keeping its mean."""
    new = cfg.beta * flatten(net) + (1 - cfg.beta) * torch.stack(buffer).mean(0)
    if cfg.correction:
        for s in layout.weights:
            target = torch.stack([m[s.start:s.stop].var(unbiased=False) for m in buffer]).mean()
            seg = new[s.start:s.stop]
            mu, var = seg.mean(), seg.var(unbiased=False)
            new[s.start:s.stop] = (seg - mu) * torch.sqrt(target / var) + mu
    load_flat(net, layout, new)
