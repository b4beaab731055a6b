"""D-PSGD (Lian et al. 2017), as paper 2 runs it (Shi et al. ICML 2023, section 5):
every round each client takes ONE local SGD step on its own shard, then one gossip step

    y_i = x_i - lr_t (grad F_i(x_i; xi) + wd x_i);        x <- W_t y.

One local step is what D-PSGD is: :meth:`check` refuses engine.local_steps != 1."""
from __future__ import annotations

from vecgossip.algorithms.base import RoundAlgorithm


class DPSGD(RoundAlgorithm):
    def check(self, cfg) -> None:
        if cfg.engine.local_steps != 1 or cfg.engine.local_epochs is not None:
            raise ValueError("D-PSGD takes exactly one local step per round (engine.local_steps=1, "
                             "engine.local_epochs=null); K > 1 is method=dfedavg")

    def communicate(self, ctx, t, clients):
        return ctx.gossip(t, clients)
