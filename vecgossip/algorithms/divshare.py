"""DivShare (Biswas, Kermarrec, Marouani, Pires, Sharma, de Vos, "Boosting Asynchronous Decentralized
Learning with Model Fragmentation", WWW 2025) in virtual seconds (clock.enabled=true; the tick
engine's windows, engines/tick/timed/). A node whose step has come (its k-th at k x c_i):

1. aggregates: every parameter is averaged with the values of it received since its last step
   (other nodes' fragments), x <- (x + sum) / (1 + count) (``ctx.merge_parts``);
2. takes one step of the configured optimiser on a fresh minibatch (``ctx.sgd_step``);
3. cuts its fresh model into ``fragments`` parts, each parameter drawn into one uniformly and
   independently (``ctx.random.torch``; a part holds Binomial(P, 1/fragments) parameters and its
   message carries exactly those bytes), and sends each part to ``peers`` nodes drawn uniformly
   without replacement among all other nodes (``ctx.random.numpy``; the whole network, not the
   topology's links): fragments x peers messages queued on its uplink in (fragment, peer) order
   (``ctx.send_parts``; with clock.policy=fifo, DivShare's queue, they leave one at a time).

A node offers as much as gossip learning with degree ``peers`` (peers x one model a step), but in
small parts to many nodes, so a slow uplink delivers some parameters early instead of whole
models late. ``flush`` (default): when a node queues a new model's fragments, the older ones
still waiting in its queue (not yet on the wire) are dropped, so a slow uplink sends fresh
parameters instead of an ever longer backlog (``flush=false``: they are sent first; under
clock.policy=fair nothing waits). The topology is not read (a graph is still built for the engine)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from vecgossip.algorithms.base import TickAlgorithm


@dataclass(frozen=True)
class Params:
    fragments: int = 10     # parts a model is cut into (the paper's 1 / Omega)
    peers: int = 6          # nodes each part goes to (the paper's J)
    flush: bool = True      # a new model's fragments replace the older ones still waiting in the queue

    def __post_init__(self) -> None:
        if not 1 <= self.fragments <= 127:
            raise ValueError(f"fragments must be an integer in [1, 127], got {self.fragments}")
        if self.peers < 1:
            raise ValueError(f"peers must be an integer >= 1, got {self.peers}")


class DivShare(TickAlgorithm):
    Params = Params

    inbox = "parts"         # ctx.send_parts / ctx.merge_parts (the memory estimate counts its sums)

    def check(self, cfg) -> None:
        if not cfg.clock.enabled:
            raise ValueError("method=divshare runs in virtual seconds: it needs clock.enabled=true (its fragments "
                             "queue on uplinks; docs: Time, stragglers and churn)")
        if self.params.peers > cfg.topology.n - 1:
            raise ValueError(f"algorithm.peers={self.params.peers} is more than the other nodes "
                             f"({cfg.topology.n - 1})")

    def train(self, ctx, t, nodes):
        ctx.merge_parts(nodes)
        return ctx.sgd_step(nodes)

    def after_train(self, ctx, t, senders, online):
        ids, recipients = draw(ctx, senders, self.params.fragments, self.params.peers)
        ctx.send_parts(senders, ids, recipients, online, t, replace_waiting=self.params.flush)


def draw(ctx, senders: np.ndarray, fragments: int, peers: int) -> tuple[torch.Tensor | None, np.ndarray]:
    """The senders' fragment ids (M, P) int8 (torch stream) and recipients (M, F, J) (numpy
    stream: for each sender and fragment, J of the other nodes without replacement)."""
    m = senders.size
    if not m:
        return None, np.zeros((0, fragments, peers), dtype=np.int64)
    gen = ctx.random.torch
    ids = torch.randint(fragments, (m, ctx.state.theta.shape[1]), generator=gen, device=gen.device,
                        dtype=torch.int8)
    keys = ctx.random.numpy.random((m, fragments, ctx.n - 1))
    pick = np.argpartition(keys, peers - 1, axis=2)[:, :, :peers] if peers < ctx.n - 1 else \
        np.broadcast_to(np.arange(ctx.n - 1), (m, fragments, ctx.n - 1))
    pick = np.sort(pick, axis=2)
    return ids, pick + (pick >= senders[:, None, None])
