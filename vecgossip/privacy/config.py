"""The ``privacy`` group's options (both engines): DP-SGD in every local step (Abadi et al. 2016,
Algorithm 1), per node. Off unless ``noise_multiplier`` is set."""
from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import Field, model_validator

from vecgossip.core.options import Options

Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Sigma = Union[Literal["auto"], Annotated[float, Field(ge=0, allow_inf_nan=False)]]


class PrivacyConfig(Options):
    """DP-SGD per node: per-sample gradients clipped to ``clip`` (L2 over the whole model), summed,
    Gaussian noise of standard deviation ``noise_multiplier * clip`` added per node and step, divided
    by the batch's sample count (its expected count under Poisson sampling). Accounting per node at
    ``delta`` by the chosen accountant; neighbouring data sets differ in one example of one node."""

    noise_multiplier: Optional[Sigma] = None   # sigma (null: DP off; 0: clipping alone, epsilon infinite; auto: from target_epsilon)
    clip: Positive = 1.0                  # C: each sample's gradient is scaled to L2 norm at most C
    delta: Annotated[float, Field(gt=0, lt=1)] = 1e-5   # the delta of the (epsilon, delta) reported
    target_epsilon: Optional[Positive] = None   # stop before a step would take any node past it (null: never); with noise_multiplier=auto, the sigma that spends it over the planned steps
    accountant: Literal["rdp", "prv", "pld"] = "rdp"   # Opacus's RDP (Mironov 2017) or PRV (Gopi et al. 2021), dp-accounting's PLD (vecgossip[pld])
    sampling: Literal["shuffle", "poisson"] = "shuffle"   # round engine: shuffled epochs of fixed batches (the Poisson bound: the convention) | poisson: each sample in with rate B / n_i (the bound holds)
    allow_large_delta: bool = False       # accept a delta of 1 / (a node's sample count) or more (such a delta allows releasing a sample outright)

    @model_validator(mode="after")
    def _target(self) -> "PrivacyConfig":
        if self.noise_multiplier == "auto" and self.target_epsilon is None:
            raise ValueError("privacy.noise_multiplier=auto needs privacy.target_epsilon: the sigma is chosen to spend it")
        if self.noise_multiplier == 0 and self.target_epsilon is not None:
            raise ValueError(f"privacy.target_epsilon={self.target_epsilon} with privacy.noise_multiplier=0: without "
                             "noise epsilon is infinite from the first step; set a noise multiplier or auto")
        return self

    @property
    def active(self) -> bool:
        return self.noise_multiplier is not None
