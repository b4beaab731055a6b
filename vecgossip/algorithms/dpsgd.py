"""D-PSGD (Lian et al. 2017), as paper 2 runs it (Shi et al. ICML 2023, section 5):
every round each client takes ONE local SGD step on its own shard, then one gossip step

    y_i = x_i - lr_t (grad F_i(x_i; xi) + wd x_i);        x <- W_t y.

One local step is what D-PSGD is: :meth:`check` refuses engine.local_steps != 1."""
from __future__ import annotations

from vecgossip.algorithms.base import Requires, RoundAlgorithm


class DPSGD(RoundAlgorithm):
    requires = Requires(local_steps=1, why="one local step per round; K > 1 is method=dfedavg")

    gossips_linearly = True   # x <- W^Q y: privacy/network.py's pairwise bound applies (with privacy.*)

    def communicate(self, ctx, t, clients):
        return ctx.gossip(t, clients)
