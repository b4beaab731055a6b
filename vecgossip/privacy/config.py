"""The ``privacy`` group's options (round engine): DP-SGD in every local step (Abadi et al. 2016,
Algorithm 1), per node. Off unless ``noise_multiplier`` is set."""
from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import Field

from vecgossip.core.options import Options

Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class PrivacyConfig(Options):
    """DP-SGD per node: per-sample gradients clipped to ``clip`` (L2 over the whole model), summed,
    Gaussian noise of standard deviation ``noise_multiplier * clip`` added per node and step, divided
    by the batch's sample count. Accounting: Opacus's RDP accountant per node at ``delta``."""

    noise_multiplier: Optional[Annotated[float, Field(ge=0, allow_inf_nan=False)]] = None   # sigma (null: DP off; 0: clipping alone, epsilon infinite)
    clip: Positive = 1.0                  # C: each sample's gradient is scaled to L2 norm at most C
    delta: Annotated[float, Field(gt=0, lt=1)] = 1e-5   # the delta of the (epsilon, delta) reported
    target_epsilon: Optional[Positive] = None   # stop before a round would take any node past it (null: never)
    accountant: Literal["rdp", "prv"] = "rdp"   # Opacus's accountant: RDP (Mironov 2017) or PRV (Gopi et al. 2021)

    @property
    def active(self) -> bool:
        return self.noise_multiplier is not None
