"""FedAvg on paper 1's tick clock (Tian et al., Algorithm 1; Fig. 8a/b): node 0 of a star is a
server that never trains; clients train every T_acq ticks and send to it; once its buffer holds a
model from every client it replaces its model by their average (Eq. 1, beta = 0 in the preset) and sends
the result straight back, and each client replaces its model with it. The server's accuracy is
what is reported."""
from __future__ import annotations

from dataclasses import dataclass

from vecgossip.algorithms.base import Requires, TickAlgorithm


@dataclass(frozen=True)
class Params:
    beta: float = 0.0          # the server's (and each client's) Eq. 1 weight on its own model
    correction: bool = False   # Algorithm 3 at the server and the clients

    def __post_init__(self) -> None:
        if not 0.0 <= self.beta <= 1.0:
            raise ValueError(f"beta must be in [0, 1], got {self.beta}")


class FedAvgTick(TickAlgorithm):
    Params = Params
    server = True

    def __init__(self, params: Params | None = None) -> None:
        super().__init__(params)
        self.correction = self.params.correction     # the compressed send keeps Algorithm 3's statistics

    requires = Requires(topologies=("star",), why="node 0 of the star is the server")

    def after_train(self, ctx, t, senders, online):
        ctx.send_models(senders, online, t)
        p = self.params
        averaged = ctx.average(t, online, p.beta, p.correction)
        if ctx.server_averaged(averaged):
            ctx.send_models(ctx.server_node(), online, t)    # the server sends the new global model back
            ctx.average(t, online, p.beta, p.correction)
