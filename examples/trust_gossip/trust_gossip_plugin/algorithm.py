"""Trust-weighted gossip: a robust aggregation with a trust score per link (issue 37's worked
example). Round t, after K local steps, receiver i with messages x_j (d_ij = ||x_j - x_i||):

    m_i = the lower median of i's d_ij;   s_ij <- s_ij * decay        if d_ij > factor * m_i  (an outlier)
                                         s_ij <- min(1, s_ij + recover)  otherwise;
    x_i <- x_i + sum_j W_ij s_ij (x_j - x_i).

A Byzantine neighbour that sends far-off models loses its weight; s is per-edge declared state."""
from __future__ import annotations

from dataclasses import dataclass

from vecgossip.algorithms import PerEdge, Requires, RoundAlgorithm


@dataclass(frozen=True)
class Params:
    factor: float = 2.0        # a link is an outlier beyond factor x the neighbourhood's median distance
    decay: float = 0.5         # its trust is multiplied by this
    recover: float = 0.1       # an inlier link's trust grows back by this (up to 1)


class TrustGossip(RoundAlgorithm):
    Params = Params
    requires = Requires(gossip_steps=1, gather=True, why="one aggregation per round")

    def state(self, layout):
        return {"trust": PerEdge((), init="ones")}           # s_ij, one per link, starts at 1

    def communicate(self, ctx, t, clients):
        trust, p = ctx.state.extra["trust"], self.params

        def aggregate(block):
            diff = (block.msgs - block.own.unsqueeze(1)).flatten(2)                # (r, d, P)
            dist = diff.norm(dim=2)                                                # (r, d)
            median = dist.masked_fill(~block.mask, float("nan")).nanmedian(1, keepdim=True).values
            r, k = block.mask.nonzero(as_tuple=True)                               # the messages received
            s = trust[block.rows[r], block.slots[r, k]]
            s = s.where(dist[r, k] <= p.factor * median[r, 0], s * p.decay)
            s = s.where(dist[r, k] > p.factor * median[r, 0], (s + p.recover).clamp(max=1))
            trust[block.rows[r], block.slots[r, k]] = s
            w = (block.weight * block.mask).index_put((r, k), block.weight[r, k] * s)
            return block.own + (w.unsqueeze(2) * diff).sum(1).view_as(block.own)

        ctx.state.theta.copy_(ctx.gather(ctx.state.theta, t, aggregate))
        return ctx.messages(t) * ctx.model_bytes
