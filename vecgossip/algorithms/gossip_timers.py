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


class GossipTimers(TickAlgorithm):
    Params = NoParams
    requires = Requires(not_topologies=("star",), why="each node sends to a random neighbour")

    def state(self, layout):
        return {"age": PerNode(())}

    inbox = "parts"         # ctx.send_parts / ctx.merge_parts (the memory estimate counts its sums)

    def check(self, cfg) -> None:
        if not cfg.clock.enabled:
            raise ValueError("method=gossip_timers runs in virtual seconds: it needs clock.enabled=true (its timers "
                             "tick in seconds; docs: Time, stragglers and churn)")

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self._host, self._seen = None, None

    def ages(self, ctx) -> np.ndarray:
        """The host's copy of the declared ``age`` (this process's rows): the merge weights and the
        sent ages are decided on the host. Read from the device only when something else wrote
        the tensor since this algorithm last did (a checkpoint loaded into it, a new run): the
        tensor's storage and in-place version counter say so, so a window reads nothing."""
        age = ctx.state.extra["age"]
        if self._seen != (age.data_ptr(), age._version):
            self._host = age.cpu().numpy().astype(np.float64)
            self._seen = (age.data_ptr(), age._version)
        return self._host

    def train(self, ctx, t, nodes):
        age, host = ctx.state.extra["age"], self.ages(ctx)
        rows = ctx.rows(nodes)
        own = host[rows]
        got = ctx.merge_parts(nodes, own)
        bad = ctx.sgd_step(nodes)
        host[rows] = np.maximum(own, got) + 1
        age[torch.as_tensor(rows, device=age.device)] = torch.as_tensor(host[rows], dtype=age.dtype, device=age.device)
        self._seen = (age.data_ptr(), age._version)
        return bad

    def after_train(self, ctx, t, senders, online):
        if not senders.size:
            ctx.send_parts(senders, None, np.zeros((0, 1, 1), dtype=np.int64), online, t)
            return
        a = ctx.a_full.tocsc()                                 # column i: the nodes i sends to
        a.sort_indices()
        deg = np.diff(a.indptr)[senders]
        pick = np.floor(ctx.random.numpy.random(senders.size) * deg).astype(np.int64)
        to = a.indices[a.indptr[senders] + pick]
        ids = torch.zeros(senders.size, ctx.state.theta.shape[1], dtype=torch.int8, device=ctx.state.theta.device)
        ctx.send_parts(senders, ids, to[:, None, None], online, t, weights=self.ages(ctx)[ctx.rows(senders)].copy())
