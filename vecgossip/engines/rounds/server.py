"""Step 2 of the round engine with a server (FedAvg / FedSAM, McMahan et al. 2017): the
participants' models averaged, weighted by their shard sizes, and sent back to every client."""
from __future__ import annotations

import numpy as np
import torch

from vecgossip.core.faults import Faults

Tensor = torch.Tensor


class Server:
    """The server's model (``model`` (1, P), None before its first average). ``weights`` (m,):
    every client's sample count n_i; ``model_bytes``: one model as sent."""

    def __init__(self, weights: Tensor, shard, faults: Faults | None, model_bytes: int) -> None:
        self.weights, self.shard, self.faults, self.model_bytes = weights, shard, faults, model_bytes
        self.model: Tensor | None = None

    def round(self, theta: Tensor, clients: Tensor, local, online: np.ndarray) -> float:
        """The participants' average becomes every client's model. Faults: each upload and each
        download (one draw per participant, then one per client, ascending) may be lost; lost
        uploads are left out (none arrived: the server keeps its model), offline clients and lost
        downloads keep their own. ``local(clients)``: this rank's rows of them. Returns the bytes
        per client (uploads + downloads)."""
        m, dev = self.shard.n, theta.device
        got = clients
        if self.faults is not None:
            got = clients[torch.from_numpy(self.faults.kept(clients.numel())).to(dev)]
        if got.numel():
            w = self.weights[got].to(theta.dtype)
            rows, _, got_np = local(got)
            sent = self.shard.gather_rows(theta[rows], self.shard.counts(got_np))           # (M, P)
            self.model = ((w @ sent) / w.sum()).unsqueeze(0)                                # (1, P)
        if self.faults is None:
            theta.copy_(self.model.expand_as(theta))
            return 2.0 * clients.numel() * self.model_bytes / m          # uploads + downloads
        down = online & self.faults.kept(m)
        if self.model is not None:
            theta[torch.from_numpy(np.flatnonzero(down)).to(dev)] = self.model
        up_sent, down_sent = clients.numel(), int(online.sum())
        self.faults.count(up_sent + down_sent, up_sent - got.numel() + down_sent - int(down.sum()))
        return (up_sent + down_sent) * self.model_bytes / m
