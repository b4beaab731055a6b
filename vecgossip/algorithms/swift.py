"""SWIFT (Bornstein, Rabbani, Wang, Bedi, Huang, "SWIFT: Rapid Decentralized Federated Learning via
Wait-Free Model Communication", ICLR 2023) in virtual seconds (clock.enabled=true; the tick
engine's windows, engines/tick/timed/). Every node keeps, per in-neighbour, the latest model
it has received from it (a cache slot; messages overtaken on the way are dropped). When node i's
step comes (its k-th at k x c_i), without waiting for anyone:

1. it averages with whatever its caches hold, x_i <- W_ii x_i + sum_j W_ij c_ij, W the
   Metropolis-Hastings weights of the graph (1/(k+1) on a k-regular graph; a neighbour not heard
   from yet counts as x_i itself) (``ctx.average_latest``);
2. takes one step of the configured optimiser on a fresh minibatch (``ctx.sgd_step``);
3. sends its fresh model to every neighbour (``ctx.send_models``: one timed message per link).

A slow node neither waits nor is waited for: its neighbours keep averaging with its last model
(stale), where a barrier round (D-PSGD) would wait for it. Communicating every step is the
paper's "communication every iteration" setting."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from vecgossip.algorithms.base import NoParams, Requires, TickAlgorithm


class SWIFT(TickAlgorithm):
    Params = NoParams
    inbox = "latest"
    requires = Requires(not_topologies=("star",), why="a wait-free average over each node's neighbours")

    def __init__(self, params=None) -> None:
        super().__init__(params)
        self._w = None           # (the active links it was made from, W)

    def seconds_workspace(self, n, p, width, d_max):
        """The caches (n, d_max, P) and one receive's gathered copy of them."""
        return 2 * n * d_max * p * width

    def check(self, cfg) -> None:
        if not cfg.clock.enabled:
            raise ValueError("method=swift runs in virtual seconds: it needs clock.enabled=true (its caches hold "
                             "what has arrived by then; docs: Time, stragglers and churn)")

    def train(self, ctx, t, nodes):
        ctx.average_latest(nodes, self.weights(ctx.a_full))
        return ctx.sgd_step(nodes)

    def after_train(self, ctx, t, senders, online):
        ctx.send_models(senders, online, t)

    def weights(self, a_full) -> sp.csr_matrix:
        """Metropolis-Hastings W of the active links (made once per set of links)."""
        if self._w is None or self._w[0] is not a_full:
            self._w = (a_full, metropolis(a_full))
        return self._w[1]


def metropolis(a) -> sp.csr_matrix:
    """W_ij = 1 / (max(d_i, d_j) + 1) on the links of ``a`` (receiver by sender, symmetric 0/1),
    W_ii = 1 - sum_j W_ij: symmetric, doubly stochastic."""
    a = sp.csr_matrix(a, dtype=np.float64)
    deg = np.asarray(a.sum(1)).ravel()
    i, j = a.nonzero()
    off = sp.csr_matrix((1.0 / (np.maximum(deg[i], deg[j]) + 1.0), (i, j)), shape=a.shape)
    return (off + sp.diags(1.0 - np.asarray(off.sum(1)).ravel())).tocsr()
