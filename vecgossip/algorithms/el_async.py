"""Epidemic Learning without rounds, in virtual seconds (clock.enabled=true): de Vos, Farhadkhani,
Guerraoui, Kermarrec, Pires, Sharma, "Epidemic Learning: Boosting Decentralized Learning with
Randomized Communication" (NeurIPS 2023), EL-Oracle's sends (each node to ``s`` nodes drawn
uniformly among all others, not the topology's links), run asynchronously: every node at its own
pace, no round barrier. When node i's step comes (its k-th at k x c_i) it

1. averages its model with every model that arrived since its last step, equal weights,
   x_i <- (x_i + sum_r x_r) / (1 + count) (``ctx.merge_parts``);
2. takes one step of the configured optimiser on a fresh minibatch (``ctx.sgd_step``);
3. sends its fresh model to ``s`` nodes drawn without replacement (``ctx.random.numpy``): s timed
   messages of the whole model (``ctx.send_parts`` with one part).

The round engine's EL (method=el_oracle) waits for every model of a round; here a slow node's
models arrive late and its receivers do not wait. Written on the public interface only."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vecgossip.algorithms.base import TickAlgorithm


@dataclass(frozen=True)
class Params:
    s: int = 2          # nodes each model is sent to, drawn among all others every step

    def __post_init__(self) -> None:
        if self.s < 1:
            raise ValueError(f"s must be an integer >= 1, got {self.s}")


class EpidemicAsync(TickAlgorithm):
    Params = Params
    inbox = "parts"                       # ctx.send_parts / ctx.merge_parts

    def check(self, cfg) -> None:
        if not cfg.clock.enabled:
            raise ValueError("method=el_async runs in virtual seconds: it needs clock.enabled=true")
        if self.params.s > cfg.topology.n - 1:
            raise ValueError(f"algorithm.s={self.params.s} is more than the other nodes ({cfg.topology.n - 1})")

    def train(self, ctx, t, nodes):
        ctx.merge_parts(nodes)
        return ctx.sgd_step(nodes)

    def after_train(self, ctx, t, senders, online):
        keys = ctx.random.numpy.random((senders.size, ctx.n - 1))          # s of the n - 1 others, uniformly
        pick = np.sort(np.argsort(keys, axis=1)[:, :self.params.s], axis=1)
        ctx.send_parts(senders, None, (pick + (pick >= senders[:, None]))[:, None, :], online, t)
