"""Neighbourhood coordinate-wise trimmed mean, BRIDGE-T (Yang and Bajwa 2019, "BRIDGE: Byzantine-
resilient decentralized gradient descent"): after its local steps each client, coordinate by
coordinate, drops the ``b`` largest and ``b`` smallest of its neighbours' values and averages the
rest with its own,

    x_i <- (x_i + sum of the d_i - 2b middle neighbour values) / (d_i - 2b + 1).

A client with d_i <= 2b messages (faults, a sparse graph) keeps its own model that round."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from vecgossip.algorithms.base import Requires, RoundAlgorithm


@dataclass(frozen=True)
class Params:
    b: int = 1                    # values trimmed at each end, per coordinate (an upper bound on Byzantine neighbours)

    def __post_init__(self) -> None:
        if self.b < 0:
            raise ValueError(f"b must be an integer >= 0, got {self.b}")


def trimmed_mean(own: torch.Tensor, msgs: torch.Tensor, mask: torch.Tensor, b: int) -> torch.Tensor:
    """(r, P) BRIDGE-T of receivers' own rows (r, P) and their messages (r, d, P) (``mask`` (r, d))."""
    ordered = torch.where(mask.unsqueeze(2), msgs, math.inf).sort(dim=1).values           # padding last
    degree = mask.sum(1, keepdim=True)                                                    # (r, 1)
    pos = torch.arange(msgs.shape[1], device=msgs.device).unsqueeze(0)                    # (1, d)
    keep = ((pos >= b) & (pos < degree - b)).unsqueeze(2)                                 # (r, d, 1)
    kept = torch.where(keep, ordered, 0).sum(1)
    count = (degree - 2 * b).clamp(min=0).to(own.dtype)
    mean = (own + kept) / (count + 1)
    return torch.where(degree > 2 * b, mean, own)


class TrimmedMean(RoundAlgorithm):
    Params = Params
    requires = Requires(gossip_steps=1, gather=True, gather_blocks=5, why="one aggregation per round")

    def communicate(self, ctx, t, clients):
        ctx.state.theta.copy_(ctx.gather(ctx.state.theta, t, self.aggregate))
        return ctx.messages(t) * ctx.model_bytes

    def aggregate(self, block) -> torch.Tensor:
        block = block.finite()                   # a non-finite message: dropped (Block.finite)
        own, msgs = block.own.flatten(1), block.msgs.flatten(2)
        return trimmed_mean(own, msgs, block.mask, self.params.b).view_as(block.own)
