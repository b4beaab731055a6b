"""Gossip learning on the tick clock (Tian et al., Algorithm 2 with Eq. 1), its rules composable:

* send rule: a node sends its freshly trained model along its links; with weight compression
  (section III-C2) each element with probability ``compression`` (1: the whole model);
* merge rule: a node whose buffer holds R x degree models merges them by Eq. 1,
      theta <- beta theta + (1 - beta) mean(buffer),
  and with ``correction`` (Algorithm 3) rescales every layer so that its variance is the
  buffer's mean variance (the fix for the vanishing variance);
* peer rule: static links, or with ``tl`` (section III-C3) no links at start, one planned peer
  added as a node reaches engine.tl.add_at on its own label mix (engine.tl.*).

Presets: gossip (beta 0.5), vc (beta 0, correction), compression (p 0.2), tl, tl_compression."""
from __future__ import annotations

from dataclasses import dataclass

from vecgossip.algorithms.base import TickAlgorithm


@dataclass(frozen=True)
class Params:
    beta: float = 0.5          # Eq. 1's weight of the node's own model
    R: int = 1                 # buffer size = R x degree
    correction: bool = False   # Algorithm 3
    compression: float = 1.0   # element send probability (III-C2)
    tl: bool = False           # transfer-learning peer rule (III-C3)

    def __post_init__(self) -> None:
        if not 0.0 <= self.beta <= 1.0:
            raise ValueError(f"beta must be in [0, 1], got {self.beta}")
        if self.R < 1:
            raise ValueError(f"R must be an integer >= 1, got {self.R}")
        if not 0.0 < self.compression <= 1.0:
            raise ValueError(f"compression must be a probability in (0, 1], got {self.compression}")


class GossipLearning(TickAlgorithm):
    Params = Params
    capturable = True      # a synchronous tick is one CUDA graph (engine.cuda_graphs; not with compression or TL)

    def __init__(self, params: Params | None = None) -> None:
        super().__init__(params)
        p = self.params      # the engine's buffers, send rule and peer rule follow these
        self.R, self.compression, self.correction, self.peer_rule = p.R, p.compression, p.correction, p.tl

    def after_train(self, ctx, t, senders, online):
        ctx.send_models(senders, online, t)
        ctx.average(t, online, self.params.beta, self.params.correction)
