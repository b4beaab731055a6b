"""FedAvg (McMahan et al. 2017), paper 2's centralised baseline: each round a server samples a
fraction of the clients (engine.participation); they run K local steps from the global model; the
server's new model is their sample-size-weighted average, x = sum_i n_i y_i / sum_i n_i, which
every client starts from next round.

FedSAM (Qu et al. 2022) is this algorithm with SAM local steps (preset method=fedsam: optim.sam)."""
from __future__ import annotations

from vecgossip.algorithms.base import RoundAlgorithm


class FedAvg(RoundAlgorithm):
    server = True

    def communicate(self, ctx, t, clients):
        return ctx.server_average(clients)
