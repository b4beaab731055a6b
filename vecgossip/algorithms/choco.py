"""CHOCO-SGD (Koloskova, Stich, Jaggi, ICML 2019, Algorithm 2): decentralized SGD with compressed
communication. Every node keeps its model x_i and public copies x_hat_j of itself and its
neighbours (all zero at the start); since every copy of x_hat_j receives the same q_j, one
stacked x_hat (m, P) stands for all of them. Round t, node i:

    x_i' = x_i - lr_t g_i(x_i)                       (the local step: engine.local_steps, optim.*)
    q_i = Q(x_i' - x_hat_i)                          (a compressor: vecgossip.algorithms.compressors)
    x_hat_j <- x_hat_j + q_j  for j in N(i) and i    (q_i is what travels)
    x_i <- x_i' + gamma sum_j w_ij (x_hat_j - x_hat_i)   = x_i' + gamma ((W x_hat)_i - x_hat_i)

Q = identity with gamma = 1 is D-PSGD; the average of x over nodes is kept by the consensus step
(1^T (W - I) = 0 for a doubly stochastic W). Bytes per client: its messages x Q's row size
(values + indices for top_k; see vecgossip.algorithms.compressors).

Faults: an offline client neither computes nor sends q (its public copy stays); a message lost on
the link j -> i is left out of i's consensus step this round (W_ij moves to W_ii), while every copy
of x_hat_j is still updated with q_j, as when a lost message is retransmitted before the next
round: the copies stay one consistent x_hat, which is what CHOCO's analysis needs."""
from __future__ import annotations

from dataclasses import dataclass

from vecgossip.algorithms.compressors import COMPRESSORS, Compressor
from vecgossip.algorithms.base import PerNode, Requires, RoundAlgorithm


@dataclass(frozen=True)
class Params:
    gamma: float = 0.8            # consensus step size
    compressor: str = "top_k"     # identity | top_k | rand_k | qsgd | sign
    fraction: float = 0.01        # top_k / rand_k: the share of entries sent
    levels: int = 16              # qsgd: s

    def __post_init__(self) -> None:
        if not 0.0 < self.gamma <= 1.0:
            raise ValueError(f"gamma must be in (0, 1], got {self.gamma}")
        if self.compressor not in COMPRESSORS:
            raise ValueError(f"compressor={self.compressor!r} is unknown; allowed: {', '.join(COMPRESSORS)}")
        Compressor(self.compressor, self.fraction, self.levels)


class ChocoSGD(RoundAlgorithm):
    Params = Params

    def __init__(self, params: Params | None = None) -> None:
        super().__init__(params)
        p = self.params
        self.compress = Compressor(p.compressor, p.fraction, p.levels)

    def state(self, layout):
        return {"x_hat": PerNode(("P",))}

    requires = Requires(gossip_steps=1, why="one consensus step per round; gamma sets its size")

    def communicate(self, ctx, t, clients):
        x, x_hat = ctx.state.theta, ctx.state.extra["x_hat"]
        key = int(ctx.random.numpy.integers(2**63))                     # this round's seed of Q
        q = self.compress(x - x_hat, ctx.node_ids, key)                 # (m', P)
        q[~ctx.online[ctx.node_ids]] = 0                                # offline: nothing computed or sent
        x_hat += q
        size = self.compress.row_bytes(x.shape[1], x.element_size())   # what travels: q, compressed
        x += self.params.gamma * (ctx.mix(x_hat, t, bytes=size) - x_hat)
        return ctx.messages(t) * size
