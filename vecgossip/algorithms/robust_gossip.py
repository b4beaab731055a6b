"""Gossip learning with a robust merge, on the tick clock (issue 49): a node whose training tick has
come pulls its in-neighbours' current models (the gather service over its active links) and merges
them by a robust rule instead of Eq. 1's mean of a buffer,

    x_i <- beta x_i + (1 - beta) rule(x_i; {x_j : j -> i}),

``rule``: ``clip``, ClippedGossip's self-centred clipping (He, Karimireddy and Jaggi 2022) with
equal weights, x_i + mean_j clip(x_j - x_i, tau_i) (``tau`` null: the adaptive radius, each
receiver's second-largest distance); ``median``, the coordinate-wise median of its own and its
neighbours' values; ``trimmed``, BRIDGE-T's trimmed mean (``b`` values dropped at each end). A
Byzantine neighbour's message is what its attack forges for that receiver; a message holding NaN
or inf is dropped (Block.finite). The nodes that did not train this tick keep their models."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from vecgossip.algorithms.base import Requires, TickAlgorithm
from vecgossip.algorithms.clipped_gossip import radius
from vecgossip.algorithms.median import median
from vecgossip.algorithms.trimmed_mean import trimmed_mean

RULES = ("clip", "median", "trimmed")


@dataclass(frozen=True)
class Params:
    rule: str = "clip"           # clip | median | trimmed
    beta: float = 0.0            # the weight of the node's own model in the merge
    tau: float | None = None     # clip: the radius (null: adaptive)
    b: int = 1                   # trimmed: values dropped at each end, per coordinate

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"rule must be one of {', '.join(RULES)}, got {self.rule!r}")
        if not 0.0 <= self.beta <= 1.0:
            raise ValueError(f"beta must be in [0, 1], got {self.beta}")
        if self.tau is not None and not self.tau > 0:
            raise ValueError(f"tau must be > 0 or null (adaptive), got {self.tau}")
        if self.b < 0:
            raise ValueError(f"b must be an integer >= 0, got {self.b}")


class RobustGossip(TickAlgorithm):
    Params = Params
    requires = Requires(gather=True, gather_blocks=5, why="a robust merge of the neighbours' models")

    def after_train(self, ctx, t, senders, online):
        a = ctx.a_full.tocsr()                                              # (N, N) receiver by sender
        deg = np.asarray(a.sum(1)).ravel()
        w = sp.diags(1.0 / np.maximum(deg, 1)) @ a                          # each in-neighbour 1/deg (the gather's W)
        due = np.zeros(ctx.n, dtype=bool)
        due[senders] = True
        merged = ctx.gather(ctx.state.theta, w, lambda block: self.merge(block, due))
        ctx.state.theta.copy_(merged)

    def merge(self, block, due: np.ndarray) -> torch.Tensor:
        """The block's receivers that trained this tick: beta x_i + (1 - beta) rule(...); the others
        keep their own rows."""
        block = block.finite()
        p = self.params
        own, msgs, mask = block.own.flatten(1), block.msgs.flatten(2), block.mask
        if p.rule == "clip":
            diff = msgs - own.unsqueeze(1)                                  # (r, d, P)
            dist = diff.norm(dim=2)
            tau = radius(dist, mask, p.tau)
            scale = torch.where(dist > tau, tau / dist.clamp(min=torch.finfo(dist.dtype).tiny), torch.ones_like(dist))
            w = mask.to(diff.dtype) * scale / mask.sum(1, keepdim=True).clamp(min=1).to(diff.dtype)
            robust = own + (w.unsqueeze(2) * diff).sum(1)
        elif p.rule == "median":
            robust = median(own, msgs, mask)
        else:
            robust = trimmed_mean(own, msgs, mask, p.b)
        new = torch.lerp(robust, own, p.beta)
        here = torch.from_numpy(due[block.receivers]).to(own.device).unsqueeze(1)
        return torch.where(here & mask.any(1, keepdim=True), new, own).view_as(block.own)
