"""Decentralized FedProx ("DFedProx"): FedProx's proximal local objective (Li et al., MLSys 2020,
Eq. 2) in DFedAvg's decentralized round (Sun et al. 2022). Round t, client i:

    a_i = x_i                                           (the anchor: the model the round starts from)
    K times:  g = grad F_i(y; xi) + mu (y - a_i)
              v <- m v + (g + wd y);   y <- y - lr_t v
    x <- W_t y                                          (one gossip step, engine.gossip_steps = Q)

The anchor is declared per-node state: vecgossip allocates it, checkpoints it, stacks it for
replicas and splits it across torchrun ranks. mu = 0 is DFedAvg exactly."""
from __future__ import annotations

from dataclasses import dataclass

from vecgossip.algorithms import PerNode, RoundAlgorithm


@dataclass(frozen=True)
class Params:
    mu: float = 0.01           # proximal weight

    def __post_init__(self) -> None:
        if not self.mu >= 0:
            raise ValueError(f"mu must be >= 0, got {self.mu}")


class DFedProx(RoundAlgorithm):
    Params = Params

    def state(self, layout):
        return {"anchor": PerNode(("params",))}     # a_i: the parameters at the round's start

    def local_train(self, ctx, clients, lr):
        p = ctx.layout.params_size
        rows = ctx.rows(clients)
        anchor = ctx.state.extra["anchor"]
        anchor[rows] = ctx.state.theta[rows, :p]    # a_i = x_i
        opt, mu = ctx.opt, self.params.mu

        def step(theta, momentum, x, y, weight, lr, chunk_rows):
            loss, g = ctx.loss_and_grad(theta, x, y, weight)
            w, v = theta[:, :p], momentum[:, :p]    # parameters only: BatchNorm statistics are not trained
            g = g[:, :p] + mu * (w - anchor[chunk_rows]) + opt.weight_decay * w
            v.mul_(opt.momentum).add_(g)
            w.sub_(lr * v)
            return loss
        return ctx.local_sgd(clients, lr, step=step)

    def communicate(self, ctx, t, clients):
        return ctx.gossip(t, clients)
