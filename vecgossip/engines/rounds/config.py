"""The round engine's options: the ``engine`` group of paper 2's methods (``conf/engine/rounds.yaml``)."""
from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import Field, model_validator

from vecgossip.core.options import Options
from vecgossip.engines.options import Chunk, Divergence, Malloc


class RoundOptions(Options):
    """Synchronous rounds (paper 2): local steps, gossip steps, participation, what is measured."""

    name: Literal["rounds"] = "rounds"
    rounds: Annotated[int, Field(ge=1)] = 1000     # rounds to run
    local_steps: Optional[Annotated[int, Field(ge=1)]] = None   # K local iterations per round, or null ...
    local_epochs: Optional[Annotated[int, Field(ge=1)]] = 5     # ... E epochs = E x ceil(n_i / B) iterations
    gossip_steps: Annotated[int, Field(ge=1)] = 1   # Q: x <- W x repeated Q times per round (MGS)
    participation: Annotated[float, Field(gt=0, le=1)] = 1.0   # fraction of clients that train each round
    eval_every: Annotated[int, Field(ge=1)] = 10    # rounds between evaluations
    train_chunk: Chunk = "auto"
    eval_chunk: Chunk = "auto"
    on_divergence: Divergence = "stop"
    malloc: Malloc = "tuned"

    @model_validator(mode="after")
    def _one_budget(self) -> "RoundOptions":
        if (self.local_steps is None) == (self.local_epochs is None):
            raise ValueError(f"set exactly one of engine.local_steps and engine.local_epochs; got "
                             f"local_steps={self.local_steps}, local_epochs={self.local_epochs}")
        return self
