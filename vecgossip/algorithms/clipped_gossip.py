"""ClippedGossip, self-centred clipping (He, Karimireddy and Jaggi 2022, "Byzantine-robust
decentralized learning via ClippedGossip", Algorithm 1): after its local steps, each client moves
towards each neighbour by at most ``tau``,

    x_i <- x_i + sum_j W_ij clip(x_j - x_i, tau_i),    clip(v, tau) = v min(1, tau / ||v||),

so that a Byzantine neighbour can pull it by at most W_ij tau whatever it sends. ``tau`` null: the
paper's adaptive radius (its code's rule): tau_i is the second-largest distance ||x_j - x_i||
among i's messages (the largest when there is one). tau = inf is D-PSGD's W x (W's rows sum to
one). Runs on the gather service, so faults (a lost message is not there) and adversaries apply."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from vecgossip.algorithms.base import Requires, RoundAlgorithm


@dataclass(frozen=True)
class Params:
    tau: float | None = None      # clipping radius; null: adaptive (each receiver's second-largest distance)

    def __post_init__(self) -> None:
        if self.tau is not None and not self.tau > 0:
            raise ValueError(f"tau must be > 0 or null (adaptive), got {self.tau}")


def radius(dist: torch.Tensor, mask: torch.Tensor, tau: float | None) -> torch.Tensor:
    """(r, 1) each receiver's clipping radius from its messages' distances (r, d)."""
    if tau is not None:
        return dist.new_full((dist.shape[0], 1), tau)
    ranked = torch.where(mask, dist, -math.inf).sort(dim=1, descending=True).values
    second = torch.where(mask.sum(1) >= 2, ranked[:, min(1, ranked.shape[1] - 1)], ranked[:, 0])
    return second.clamp(min=0).unsqueeze(1)


class ClippedGossip(RoundAlgorithm):
    Params = Params
    requires = Requires(gossip_steps=1, gather=True, gather_blocks=3, why="one clipped gossip step per round")

    def communicate(self, ctx, t, clients):
        ctx.state.theta.copy_(ctx.gather(ctx.state.theta, t, self.aggregate))
        return ctx.messages(t) * ctx.model_bytes

    def aggregate(self, block) -> torch.Tensor:
        """x_i + sum_j W_ij clip(x_j - x_i, tau_i) for a block of receivers (a non-finite message:
        dropped, Block.finite)."""
        block = block.finite()
        diff = (block.msgs - block.own.unsqueeze(1)).flatten(2)                 # (r, d, P)
        dist = diff.norm(dim=2)                                                 # (r, d)
        tau = radius(dist, block.mask, self.params.tau)
        scale = torch.where(dist > tau, tau / dist.clamp(min=torch.finfo(dist.dtype).tiny), torch.ones_like(dist))
        w = (block.weight * block.mask).to(diff.dtype) * scale                  # (r, d)
        return block.own + (w.unsqueeze(2) * diff).sum(1).view_as(block.own)
