"""What the round-engine baselines' twins share: per-node plain modules from the engine's initial
models, its sampler's draws replayed from a copy, its fault draws replayed from a copy of the same
stream, the ring's W written out, and W x as Python loops."""
from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn.functional as F

from conftest import faults_of
from vecgossip.core.state import flatten, load_flat
from vecgossip.models import build as build_model


class Twin:
    """Per-node plain modules from the engine's initial models, its sampler's draws replayed from
    a copy, and (under faults) its fault draws replayed from a copy of the same stream."""

    def __init__(self, cfg, engine):
        self.cfg, self.layout, self.data, self.m = cfg, engine.layout, engine.train_data, engine.m
        self.nets = []
        for i in range(self.m):
            net = build_model(cfg.model.name, self.data.shape, self.data.num_classes).double()
            load_flat(net, self.layout, engine.state.theta[i])
            self.nets.append(net)
        s = engine.sampler
        self.sampler = copy.copy(s)
        self.sampler.gen = torch.Generator().set_state(s.gen.get_state())
        self.sampler.order, self.sampler.step = s.order.clone(), s.step.clone()
        self.faults = faults_of(cfg, self.m)
        self.o = cfg.optim

    def x(self, i: int) -> torch.Tensor:
        return flatten(self.nets[i]).detach().clone()

    def set(self, i: int, flat: torch.Tensor) -> None:
        load_flat(self.nets[i], self.layout, flat)

    def grads(self, at: list[torch.Tensor]) -> list[torch.Tensor]:
        """Every node's minibatch gradient at the flat models ``at`` (the next batch of each)."""
        batch = self.sampler.next(torch.arange(self.m))
        out = []
        for i, net in enumerate(self.nets):
            self.set(i, at[i])
            x, y, wt = batch.materialise(self.data, i, i + 1)
            keep = wt[0] > 0
            net.zero_grad()
            F.cross_entropy(net(x[0][keep]), y[0][keep]).backward()
            out.append(torch.cat([p.grad.flatten() for p in net.parameters()]))
        return out

    def lr(self, t: int) -> float:
        return self.o.lr * self.o.lr_decay ** t


def ring_w(m: int) -> np.ndarray:
    """The ring's Metropolis-Hastings W: 1/3 on each node and its two neighbours."""
    w = np.zeros((m, m))
    for i in range(m):
        for j in (i - 1, i, i + 1):
            w[i, j % m] = 1 / 3
    return w


def mix(w: np.ndarray, xs: list[torch.Tensor]) -> list[torch.Tensor]:
    """x_i <- sum_j w_ij x_j, as Python loops."""
    out = []
    for i in range(len(xs)):
        acc = torch.zeros_like(xs[i])
        for j in range(len(xs)):
            if w[i, j]:
                acc = acc + w[i, j] * xs[j]
        out.append(acc)
    return out


def top_k(v: torch.Tensor, k: int) -> torch.Tensor:
    """The k entries of largest magnitude, by numpy's sort (an independent top-k)."""
    a = v.numpy()
    keep = np.argsort(-np.abs(a), kind="stable")[:k]
    out = np.zeros_like(a)
    out[keep] = a[keep]
    return torch.from_numpy(out)
