"""FedBuff (Nguyen et al., "Federated Learning with Buffered Asynchronous Aggregation", AISTATS
2022, Algorithm 1): the asynchronous FL baseline, in virtual seconds (clock.enabled=true). The
server keeps ``concurrency`` clients training at once; a client downloads the server's model x_v
(version v), takes its K_i local steps to y_i and uploads Delta_i = y_i - x_v; the server adds
each arriving Delta_i, weighted by its staleness tau_i = (the server's version) - v as
s(tau) = 1 / sqrt(1 + tau) (the paper's choice; ``staleness=none``: 1), and after ``buffer`` (K)
of them steps

    x <- x + eta_g / K * sum_i s(tau_i) Delta_i,

then the next round begins (one engine round = one server step). Who is dispatched and when comes
from the clock (``ctx.asynchronous_round``: downloads, local work and uploads over the server's
links); the clients dispatched at one version train from its model in one batch. The server's
first model is client 0's initial model. Written on the public interface only."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from vecgossip.algorithms.base import PerNode, Requires, RoundAlgorithm


@dataclass(frozen=True)
class Params:
    buffer: int = 5             # K: uploads the server waits for before it steps
    concurrency: int = 10       # clients training at once
    server_lr: float = 1.0      # eta_g
    staleness: str = "sqrt"     # s(tau): sqrt (1 / sqrt(1 + tau)) | none (1)

    def __post_init__(self) -> None:
        if self.buffer < 1 or self.concurrency < 1 or not self.server_lr > 0 or self.staleness not in ("sqrt", "none"):
            raise ValueError("buffer and concurrency must be >= 1, server_lr > 0, staleness sqrt or none; got "
                             f"{self.buffer}, {self.concurrency}, {self.server_lr}, {self.staleness!r}")


class FedBuff(RoundAlgorithm):
    server = True
    Params = Params
    requires = Requires(seconds=True, why="an asynchronous server: who uploads when is the clock's")

    def state(self, layout):
        return {"delta": PerNode((layout.size,))}        # Delta_i of the client's last work

    def check(self, cfg) -> None:
        m = cfg.topology.n
        if self.params.concurrency > m or self.params.buffer > m:
            raise ValueError(f"algorithm.concurrency={self.params.concurrency} and algorithm.buffer={self.params.buffer} "
                             f"must be at most clients={m}")

    def participants(self, ctx, t):
        self.uploads = ctx.asynchronous_round(self.params.buffer, self.params.concurrency)
        return self.uploads.train

    def local_train(self, ctx, clients, lr):
        if ctx.global_model is None:                       # the server starts from client 0's model
            ctx.set_global_model(ctx.server_sum(ctx.state.theta, torch.zeros(1, dtype=torch.long), [1.0]))
        rows = ctx.rows(clients)
        ctx.state.theta[rows] = ctx.global_model
        loss = ctx.local_sgd(clients, lr)
        ctx.state.extra["delta"][rows] = ctx.state.theta[rows] - ctx.global_model
        return loss

    def communicate(self, ctx, t, clients):
        up = self.uploads
        tau = t - up.versions
        s = 1.0 / np.sqrt(1.0 + tau) if self.params.staleness == "sqrt" else np.ones(tau.size)
        order = np.argsort(up.arrived, kind="stable")      # the server's sum, over sorted clients
        arrived = torch.as_tensor(up.arrived[order], device=ctx.state.theta.device)
        step = ctx.server_sum(ctx.state.extra["delta"], arrived, s[order] / self.params.buffer)
        ctx.set_global_model(ctx.global_model + self.params.server_lr * step)
        return up.bytes
