"""The tick engine's options: the ``engine`` group of paper 1's methods (``conf/engine/tick.yaml``)."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from vecgossip.core.options import Options
from vecgossip.engines.options import Chunk, Divergence, Malloc
from vecgossip.network.peers import TLConfig

Share = Annotated[float, Field(ge=0, le=1)]


class TickOptions(Options):
    """The tick clock (section III-A): who trains when, how long, what is measured."""

    name: Literal["tick"] = "tick"
    t_acq: Any = 10                       # ticks between a node's steps: an int >= 1, or [lo, hi] drawn uniformly
    max_ticks: Annotated[int, Field(ge=1)] = 10_000   # the clock stops here (or earlier with early_stop)
    eval_every: Annotated[int, Field(ge=1)] = 10      # ticks between evaluations
    early_stop: bool = False              # stop once more than most_frac of the nodes reach threshold
    threshold: Share = 0.9                # the reach threshold (accuracy)
    most_frac: Annotated[float, Field(ge=0, lt=1)] = 0.9   # "most reaching": more than this fraction of nodes
    eval_chunk: Chunk = "auto"            # nodes per evaluation chunk
    train_chunk: Chunk = "auto"           # nodes per training chunk
    on_divergence: Divergence = "stop"
    guard_every: Chunk = "auto"           # ticks between reads of the divergence guard (a host sync): auto = eval_every on a GPU under on_divergence=stop, else 1
    cuda_graphs: Literal["auto", "on", "off"] = "auto"   # a synchronous tick's device work as one CUDA graph (engines/tick/graphs.py): auto = where it can be
    malloc: Malloc = "tuned"
    tl: TLConfig = TLConfig()             # the transfer-learning peer rule (III-C3)

    @field_validator("t_acq", mode="before")
    @classmethod
    def _range(cls, v):
        """An int >= 1, or ``[lo, hi]`` with 1 <= lo <= hi (inclusive uniform draws), kept as a tuple."""
        ints = isinstance(v, (list, tuple)) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
        if isinstance(v, int) and not isinstance(v, bool) and v >= 1:
            return v
        if ints and len(v) == 2 and 1 <= v[0] <= v[1]:
            return tuple(v)
        raise ValueError(f"engine.t_acq must be an integer >= 1 or [lo, hi] with 1 <= lo <= hi, got {v!r}")

    @property
    def t_acq_range(self) -> tuple[int, int]:
        """(lo, hi) inclusive; (n, n) for a fixed interval."""
        return (self.t_acq, self.t_acq) if isinstance(self.t_acq, int) else self.t_acq


def t_acq_range(v) -> tuple[int, int]:
    """A ``t_acq`` value (an int, or [lo, hi] of any sequence type) as (lo, hi), checked."""
    return TickOptions(t_acq=v if isinstance(v, int) else list(v)).t_acq_range
