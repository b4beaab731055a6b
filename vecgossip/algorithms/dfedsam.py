"""DFedSAM (Shi et al. ICML 2023, Algorithm 1): K local SAM steps, then gossip

    g = grad F_i(y; xi);  e = rho g / ||g||_2;
    v <- mu v + (grad F_i(y + e; xi) + wd y);  y <- y - lr_t v      (K times, from y = x_i)
    x <- W_t y.

DFedSAM-MGS (Algorithm 2) is this algorithm with Q gossip steps per round, x <- W_t^Q y (preset
method=dfedsam_mgs, engine.gossip_steps = 4). The radius rho is optim.rho; momentum mu 0.9 by
default, as DFedAvgM (optim.momentum=0 gives the paper's formula exactly)."""
from __future__ import annotations

from vecgossip.algorithms.base import RoundAlgorithm


class DFedSAM(RoundAlgorithm):
    sam = True          # the local steps are SAM steps, whatever optim.sam says

    def communicate(self, ctx, t, clients):
        return ctx.gossip(t, clients)
