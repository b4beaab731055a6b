"""FedPer (Arivazhagan et al. 2019, "Federated learning with personalization layers"), gossiped: K
local SGD steps, then one gossip step of the base layers only; the personalisation layers (by
default the model's last layer, its classifier) never leave the client,

    y <- K local steps from x_i;     y[base] <- (W_t y)[base],     y[personal] kept.

Partial sharing on the documented layout API (:meth:`vecgossip.core.state.Layout.columns`); the
bytes counted are the base layers' only. Each client's accuracy on its own test split is the
personalised one that matters here."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from vecgossip.algorithms.base import RoundAlgorithm


@dataclass(frozen=True)
class Params:
    local: Optional[list] = None      # layers kept local (names such as fc2, or a prefix such as layer4); null: the last layer


class FedPer(RoundAlgorithm):
    Params = Params

    def check(self, cfg) -> None:
        try:
            self.shared(cfg.layout)
        except ValueError as err:               # the layers named do not exist: name the option
            raise ValueError(f"algorithm.local={self.params.local}: {err}") from None

    def shared(self, layout) -> torch.Tensor:
        """The columns gossiped: every tensor but those of the personal layers."""
        personal = self.params.local or [layout.specs[-1].layer]
        keep = torch.ones(layout.size, dtype=torch.bool)
        keep[layout.columns(personal)] = False
        return torch.nonzero(keep).flatten()

    def communicate(self, ctx, t, clients):
        cols = self.shared(ctx.layout).to(ctx.state.theta.device)
        theta = ctx.state.theta
        theta[:, cols] = ctx.mix(theta[:, cols], t)
        return ctx.messages(t) * ctx.model_bytes * cols.numel() / theta.shape[1]
