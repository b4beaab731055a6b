"""DFedAvg (Sun et al. 2022; paper 2's baseline): K local SGD steps from the client's model, then
one gossip step (Q with engine.gossip_steps)

    y <- y - lr_t v,  v <- mu v + (grad F_i(y; xi) + wd y)   (K times, from y = x_i);   x <- W_t^Q y.

DFedAvgM is this algorithm with local momentum mu = 0.9 (preset method=dfedavgm)."""
from __future__ import annotations

from vecgossip.algorithms.base import RoundAlgorithm


class DFedAvg(RoundAlgorithm):
    gossips_linearly = True   # x <- W^Q y: privacy/network.py's pairwise bound applies (with privacy.*)

    def communicate(self, ctx, t, clients):
        return ctx.gossip(t, clients)
