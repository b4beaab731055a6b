"""Neighbourhood coordinate-wise median, BRIDGE-M (Yang and Bajwa 2019): after its local steps each
client takes, coordinate by coordinate, the median of its own value and its neighbours' (the mean of
the two middle values when there is an even number of them)."""
from __future__ import annotations

import math

import torch

from vecgossip.algorithms.base import Requires, RoundAlgorithm


def median(own: torch.Tensor, msgs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(r, P) the coordinate-wise median of each receiver's own row (r, P) and messages (r, d, P)."""
    values = torch.cat([own.unsqueeze(1), torch.where(mask.unsqueeze(2), msgs, math.inf)], 1)   # (r, 1 + d, P)
    ordered = values.sort(dim=1).values
    count = 1 + mask.sum(1)                                                                 # (r,)
    lo, hi = ((count - 1) // 2).view(-1, 1, 1), (count // 2).view(-1, 1, 1)
    shape = (-1, 1, ordered.shape[2])
    return (ordered.gather(1, lo.expand(shape)) + ordered.gather(1, hi.expand(shape))).squeeze(1) / 2


class Median(RoundAlgorithm):
    requires = Requires(gossip_steps=1, gather=True, gather_blocks=5, why="one aggregation per round")

    def communicate(self, ctx, t, clients):
        ctx.state.theta.copy_(ctx.gather(ctx.state.theta, t, self.aggregate))
        return ctx.messages(t) * ctx.model_bytes

    def aggregate(self, block) -> torch.Tensor:
        block = block.finite()                   # a non-finite message: dropped (Block.finite)
        return median(block.own.flatten(1), block.msgs.flatten(2), block.mask).view_as(block.own)
