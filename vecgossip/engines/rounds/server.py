"""Step 2 of the round engine with a server (FedAvg / FedSAM, McMahan et al. 2017): the
participants' models averaged, weighted by their shard sizes, and sent back to every client; and
the server services a round algorithm gets (:class:`ServerServices`: FedAvg's average, timed in
virtual seconds over the server's links; the server's model; an asynchronous server, FedBuff's)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from vecgossip.core.device import host_copy, upload_indices
from vecgossip.core.errors import ConfigError
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


@dataclass(frozen=True)
class Uploads:
    """An asynchronous server's round (:meth:`RoundEngine.asynchronous_round`)."""

    train: Tensor            # (k,) sorted clients dispatched at the current version (they train now)
    arrived: np.ndarray      # clients whose uploads arrived, in arrival order
    versions: np.ndarray     # the server version (round) each arrived client trained from
    bytes: float             # per client this round: the downloads and uploads delivered


class ServerServices:
    """The round engine's server services (mixed into :class:`~.engine.RoundEngine`)."""

    def server_average(self, clients: Tensor) -> float:
        """Service: FedAvg's server average (:class:`~.server.Server`): the participants' models,
        weighted by sample size, become every client's; returns the bytes per client. Under the
        clock the round is timed first (:meth:`~vecgossip.engines.clock.rounds.RoundTimer.server_round`:
        downloads, local work, uploads over the server's links): a participant that went offline
        before its upload arrived is not averaged."""
        if self.mixing is not None:
            raise RuntimeError(f"{self.algorithm.name()} asked for a server average: set server = True on "
                               "the algorithm class (no graph is built then)")
        if self.timer is not None:
            who = host_copy(clients)
            arrived = self.timer.server_round(self.round_steps(clients), who, self.model_bytes, self.model_bytes)
            self.timed = True
            if not arrived[who].all():
                clients = upload_indices(who[arrived[who]], self.device)
        return self.server.round(self.state.theta, clients, self.local, self.online)

    def server_sum(self, x: Tensor, clients: Tensor, weights) -> Tensor:
        """Service: sum_i weights_i x_i over the sorted global ``clients`` (weights (k,), a host
        array or tensor), as the server holds it: (1, ...), the same on every rank (sharded, the
        rows come from their ranks)."""
        rows, _, got = self.local(clients)
        sent = self.shard.gather_rows(x[rows].reshape(rows.numel(), -1), self.shard.counts(got))
        w = torch.as_tensor(np.asarray(weights, dtype=np.float64), device=x.device).to(x.dtype)
        return (w @ sent).reshape(1, *x.shape[1:])

    def set_global_model(self, model: Tensor) -> None:
        """Service: the server's model becomes ``model`` (1, P) (what the metrics of a server
        algorithm measure; ``global_model`` reads it)."""
        self.server.model = model.reshape(1, -1).to(self.state.theta.dtype)

    def asynchronous_round(self, buffer: int, concurrency: int):
        """Service: an asynchronous server's next ``buffer`` uploads in virtual seconds
        (:class:`~vecgossip.engines.clock.dispatch.Dispatcher`: ``concurrency`` clients in flight,
        each downloading the model, taking its K_i local steps and uploading it). Returns
        :class:`Uploads`: ``train`` (clients dispatched at the server's current version: they
        train from its model this round), ``arrived`` (clients whose uploads the server reads now,
        in arrival order), ``versions`` (the version each trained from: the round it was
        dispatched in), ``bytes`` (per client this round: downloads and uploads delivered)."""
        if self.timer is None:
            raise ConfigError(f"method {self.algorithm.name()}: an asynchronous server needs clock.enabled=true "
                              "(who uploads when is the clock's)")
        trains, arrived, versions, downloads = self.timer.asynchronous(
            self.steps * self.timer.step_seconds, float(self.model_bytes), int(concurrency), int(buffer))
        self.timed = True
        return Uploads(upload_indices(trains, self.device), arrived, versions,
                       (downloads + arrived.size) * self.model_bytes / self.m)
