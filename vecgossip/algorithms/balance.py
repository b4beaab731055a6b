"""BALANCE (Fang et al., CCS 2024, "Byzantine-robust decentralized federated learning",
Algorithm 1): a client accepts a neighbour's model only if it is
close to its own, relative to its own norm, with a threshold that tightens over the rounds,

    accept j  iff  ||x_j - x_i|| <= gamma exp(-kappa t / T) ||x_i||,
    x_i <- alpha x_i + (1 - alpha) mean(accepted)          (x_i unchanged when none is accepted),

T the run's rounds."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from vecgossip.algorithms.base import Requires, RoundAlgorithm


@dataclass(frozen=True)
class Params:
    gamma: float = 0.3            # acceptance radius, relative to the client's own norm
    kappa: float = 1.0            # how fast the radius shrinks over the rounds
    alpha: float = 0.5            # weight of the client's own model

    def __post_init__(self) -> None:
        if not (self.gamma > 0 and self.kappa >= 0 and 0 <= self.alpha <= 1):
            raise ValueError(f"gamma must be > 0, kappa >= 0 and alpha in [0, 1], got {self}")


class Balance(RoundAlgorithm):
    Params = Params
    requires = Requires(gossip_steps=1, gather=True, gather_blocks=3, why="one aggregation per round")
    rounds = 1

    def check(self, cfg) -> None:
        self.rounds = cfg.engine.rounds                     # T of the threshold's schedule

    def communicate(self, ctx, t, clients):
        p = self.params
        self.threshold = p.gamma * math.exp(-p.kappa * t / self.rounds)
        ctx.state.theta.copy_(ctx.gather(ctx.state.theta, t, self.aggregate))
        return ctx.messages(t) * ctx.model_bytes

    def aggregate(self, block) -> torch.Tensor:
        block = block.finite()                   # a non-finite message: dropped (Block.finite)
        own, msgs = block.own.flatten(1), block.msgs.flatten(2)
        dist = (msgs - own.unsqueeze(1)).norm(dim=2)                            # (r, d)
        accept = block.mask & (dist <= self.threshold * own.norm(dim=1, keepdim=True))
        count = accept.sum(1, keepdim=True).to(own.dtype)
        mean = (accept.unsqueeze(2) * msgs).sum(1) / count.clamp(min=1)
        alpha = self.params.alpha
        return torch.where(count > 0, alpha * own + (1 - alpha) * mean, own).view_as(block.own)
