"""Gossip learning with periodic timers and age-weighted merges (Ormandi, Hegedus, Jelasity,
"Gossip learning with linear models on fully distributed data", 2013; Hegedus, Danner, Jelasity,
"Decentralized learning works", 2021) in virtual seconds (clock.enabled=true; engines/tick/
seconds.py). Every node has a timer whose period is its step time c_i (clock.compute) and a model
age a_i (0 at start; checkpointed per-node state ``age``). At each timer event (its k-th at
k x c_i):

1. merge: the models (x_r, a_r) received since the last event, age-weighted,
   x_i <- (a_i x_i + sum_r a_r x_r) / (a_i + sum_r a_r),  a_i <- max(a_i, max_r a_r)
   (a node of age 0 adopts what it received; nothing received: x_i stays);
2. update: one step of the configured optimiser on a fresh minibatch, a_i <- a_i + 1;
3. send (x_i, a_i) to one neighbour drawn uniformly (``ctx.random.numpy``): one timed message.

The papers merge and update on each receipt; here the merge and the one update wait for the
node's next timer event, so a node's compute stays one step per period (the clock does not model
compute triggered by an inbox), and models received in one period merge at once, weighted by age
(equal to the papers' sequence of pairwise merges when at most one model arrives per period,
the common case with one message sent per period)."""
from __future__ import annotations

import numpy as np
import torch

from vecgossip.algorithms.base import NoParams, PerNode, Requires, TickAlgorithm
from vecgossip.algorithms.divshare import fragment_workspace


class GossipTimers(TickAlgorithm):
    Params = NoParams
    requires = Requires(not_topologies=("star",), why="each node sends to a random neighbour")

    def state(self, layout):
        return {"age": PerNode(())}

    def seconds_workspace(self, n, p, width, d_max):
        return fragment_workspace(n, p, width)

    def check(self, cfg) -> None:
        if not cfg.clock.enabled:
            raise ValueError("method=gossip_timers runs in virtual seconds: it needs clock.enabled=true (its timers "
                             "tick in seconds; docs: Time, stragglers and churn)")

    def train(self, ctx, t, nodes):
        age = ctx.state.extra["age"]
        rows = torch.as_tensor(ctx.rows(nodes), device=age.device)
        own = age[rows].cpu().numpy()
        got = ctx.merge_fragments(nodes, own)
        bad = ctx.sgd_step(nodes)
        age[rows] = torch.as_tensor(np.maximum(own, got) + 1, dtype=age.dtype, device=age.device)
        return bad

    def after_train(self, ctx, t, senders, online):
        if not senders.size:
            ctx.send_fragments(senders, None, np.zeros((0, 1, 1), dtype=np.int64), online, t)
            return
        a = ctx.a_full.tocsc()                                 # column i: the nodes i sends to
        a.sort_indices()
        deg = np.diff(a.indptr)[senders]
        pick = np.floor(ctx.random.numpy.random(senders.size) * deg).astype(np.int64)
        to = a.indices[a.indptr[senders] + pick]
        age = ctx.state.extra["age"]
        ids = torch.zeros(senders.size, ctx.state.theta.shape[1], dtype=torch.int8, device=ctx.state.theta.device)
        ctx.send_fragments(senders, ids, to[:, None, None], online, t,
                           weights=age[torch.as_tensor(ctx.rows(senders), device=age.device)].cpu().numpy())
