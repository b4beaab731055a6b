"""Staleness-discounted gossip learning in virtual seconds (clock.enabled=true): FedAsync's
polynomial staleness weight (Xie, Koyejo, Gupta, "Asynchronous Federated Optimization", 2019,
s(tau) = (1 + tau)^-a) applied per message by its receiver, tau the seconds it spent between its
send and its arrival. When node i's step comes (its k-th at k x c_i) it

1. merges what arrived since its last step, x_i <- (x_i + sum_r s(tau_r) x_r) / (1 + sum_r s(tau_r))
   (nothing arrived: x_i stays) (``ctx.merge_parts``, weights from :meth:`arrival_weight`);
2. takes one step of the configured optimiser on a fresh minibatch (``ctx.sgd_step``);
3. sends its fresh model to one neighbour drawn uniformly (``ctx.random.numpy``): one timed
   message of the whole model (``ctx.send_parts`` with one part).

A model that queued behind a slow uplink counts less than a fresh one; a = 0 is plain push
gossip with equal weights. Written on the public interface only (vecgossip.algorithms)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vecgossip.algorithms.base import Requires, TickAlgorithm


@dataclass(frozen=True)
class Params:
    a: float = 0.5     # the staleness exponent: a message tau seconds old counts (1 + tau)^-a

    def __post_init__(self) -> None:
        if not self.a >= 0:
            raise ValueError(f"a must be >= 0, got {self.a}")


class StalenessGossip(TickAlgorithm):
    Params = Params
    inbox = "parts"                       # ctx.send_parts / ctx.merge_parts
    requires = Requires(not_topologies=("star",), why="each node sends to a random neighbour")

    def check(self, cfg) -> None:
        if not cfg.clock.enabled:
            raise ValueError("method=staleness_gossip runs in virtual seconds: it needs clock.enabled=true")

    def arrival_weight(self, staleness: np.ndarray) -> np.ndarray:
        return (1.0 + staleness) ** -self.params.a

    def train(self, ctx, t, nodes):
        ctx.merge_parts(nodes)
        return ctx.sgd_step(nodes)

    def after_train(self, ctx, t, senders, online):
        a = ctx.a_full.tocsc()                                 # column i: the nodes i sends to
        a.sort_indices()
        deg = np.diff(a.indptr)[senders]
        pick = np.floor(ctx.random.numpy.random(senders.size) * deg).astype(np.int64)
        to = a.indices[a.indptr[senders] + pick] if senders.size else np.zeros(0, dtype=np.int64)
        ctx.send_parts(senders, None, to[:, None, None], online, t)
