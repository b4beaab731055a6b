"""Epidemic Learning (de Vos, Farhadkhani, Guerraoui, Kermarrec, Pires, Sharma, NeurIPS 2023,
Algorithm 1): every round each node sends its freshly trained model to s peers drawn at random,
and every node replaces its model by the uniform average of its own and those it received,

    x_i <- (x_i' + sum_{j in S_i} x_j') / (|S_i| + 1)            (S_i: who sent to i this round)

* EL-Local (``variant=local``): each node draws its s receivers uniformly among the others,
  independently (in-degrees vary: W_t row stochastic);
* EL-Oracle (``variant=oracle``): the round's graph is a random undirected s-regular graph
  (sampled anew every round, as decentralizepy's PeerSamplerDynamic does), W_t = (I + A_t)/(s + 1).

Peers are drawn from all nodes: the overlay is complete (topology=complete; the algorithm draws
its own graph every round from ``ctx.random``, the same on every rank). Faults: a receiver averages
what arrived (a lost message leaves its sender out of the average). Bytes per client: s models
(EL-Local), or its degree in the round's graph (EL-Oracle)."""
from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np
import scipy.sparse as sp

from vecgossip.algorithms.base import Requires, RoundAlgorithm

VARIANTS = ("local", "oracle")


@dataclass(frozen=True)
class Params:
    variant: str = "local"
    s: int = 4                 # peers each round; the paper takes about log2(n)

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"variant={self.variant!r} is unknown; allowed: {', '.join(VARIANTS)}")
        if self.s < 1:
            raise ValueError(f"s must be an integer >= 1, got {self.s}")


class EpidemicLearning(RoundAlgorithm):
    Params = Params
    mixing = "row_stochastic"

    requires = Requires(topologies=("complete",), why="its s peers are drawn from all nodes every round")

    def check(self, cfg) -> None:
        m, s = cfg.topology.n, self.params.s
        if s >= m:
            raise ValueError(f"algorithm.s={s} must be < the {m} clients")
        if self.params.variant == "oracle" and (m * s) % 2:
            raise ValueError(f"EL-Oracle's s-regular graph needs clients x s even, got {m} x {s}")
        if cfg.engine.gossip_steps != 1:
            raise ValueError("Epidemic Learning averages once per round (gossip_steps=1)")

    def round_matrix(self, m: int, rng: np.random.Generator) -> sp.csr_matrix:
        """W_t from this round's draws (every rank draws the same)."""
        s = self.params.s
        if self.params.variant == "oracle":
            g = nx.random_regular_graph(s, m, seed=int(rng.integers(2**31)))
            a = nx.to_scipy_sparse_array(g, nodelist=range(m), format="csr", dtype=np.float64)
            return (sp.csr_matrix(a) + sp.identity(m, format="csr")) / (s + 1)
        keys = rng.random((m, m))
        np.fill_diagonal(keys, np.inf)                                   # never itself
        dst = np.argsort(keys, axis=1)[:, :s]                            # (m, s): i sends to dst[i]
        a = sp.csr_matrix((np.ones(m * s), (dst.ravel(), np.repeat(np.arange(m), s))), shape=(m, m))
        a = a + sp.identity(m, format="csr")                             # receiver-by-sender, with itself
        return (sp.diags(1.0 / np.asarray(a.sum(1)).ravel()) @ a).tocsr()

    def communicate(self, ctx, t, clients):
        w = self.round_matrix(ctx.m, ctx.random.numpy)
        ctx.state.theta.copy_(ctx.mix(ctx.state.theta, t, w=w))
        return ctx.messages(t, w=w) * ctx.model_bytes
