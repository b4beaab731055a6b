"""The run's config as one typed object: the run-control options at the top, and each group as the
options model its own part declares (``ModelConfig`` in ``models/config.py``, ``DataConfig`` in
``data/config.py``, ``TopologyConfig`` in ``network/topology.py``, the engine's options in
``engines/*/config.py``, the optimiser's in ``core/optim.py``, ``FaultConfig`` in
``core/faults.py``, ``ClockConfig`` in ``engines/clock/config.py``, ``DistributedConfig`` in ``runtime/shard.py``). Nothing is declared twice:
this module only puts them together.

The short knobs (``nodes``, ``degree``, ``beta``, ...) and the ``averaging`` group hold no option
of their own: the groups read them by interpolation (``topology.n: ${nodes}``), so a knob's type
and range are its reader's, and a message about a bad value names the knob as typed
(:mod:`vecgossip.config.load`). ``algorithm`` is checked against the algorithm's own ``Params``
(:func:`vecgossip.algorithms.load`); ``hydra`` is Hydra's."""
from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import AfterValidator, Field

from vecgossip.adversaries.config import AdversaryConfig
from vecgossip.privacy.config import PrivacyConfig
from vecgossip.core.faults import FaultConfig
from vecgossip.core.optim import LocalSGDConfig, SGDConfig
from vecgossip.core.options import Options
from vecgossip.data.config import DataConfig
from vecgossip.engines.clock.config import ClockConfig
from vecgossip.engines.rounds.config import RoundOptions
from vecgossip.engines.tick.config import TickOptions
from vecgossip.models.config import ModelConfig
from vecgossip.network.topology import TopologyConfig
from vecgossip.runtime.shard import DistributedConfig

DEVICES = ("cpu", "cuda", "cuda:N", "auto")


def _device(v: str) -> str:
    if not re.fullmatch(r"cpu|auto|cuda(:\d+)?", v):
        raise ValueError(f"device={v!r} is unknown; allowed: {', '.join(DEVICES)}")
    return v


def _resume(v):
    if isinstance(v, bool) or v in ("auto", "true", "false") or (isinstance(v, str) and v):
        return v
    raise ValueError(f"resume must be auto, true, false or a checkpoint path, got {v!r}")


class Averaging(Options):
    """Paper 1's averaging knobs, read by the algorithms that interpolate them (gossip learning:
    ``algorithm.beta: ${averaging.beta}``); their types are the algorithm's ``Params``."""

    R: Any = 1                            # buffer size = R x degree
    beta: Any = 0.5                       # Eq. 1 weight of the node's own model
    correction: Any = False               # variance correction (Algorithm 3)
    compression: Any = 1.0                # probability each weight element is sent (III-C2)


class RunBase(Options):
    """Run control, the short knobs and the groups both engines have."""

    name: str = "baseline"                # the run's name (summary.json, the report)
    plugins: list[str] = []               # modules imported before the run (a user's package)
    method_name: str = "gossip"           # set by the method preset
    seed: Annotated[int, Field(ge=0)] = 0   # seeds graph, initial models, samplers, schedules
    replicas: Annotated[int, Field(ge=1)] = 1   # S simulations in one batch, seeds seed..seed+S-1
    device: Annotated[str, AfterValidator(_device)] = "cpu"   # cpu | cuda | cuda:N | auto
    precision: Literal["tf32", "fp32", "bf16", "fp64"] = "tf32"
    progress: bool = True                 # the progress bar
    compare: Optional[list[str]] = []     # the default job's methods, side by side
    compare_ticks: Annotated[int, Field(ge=1)] = 1000
    resume: Annotated[Union[bool, str], AfterValidator(_resume)] = "auto"   # auto | true | false | a checkpoint path
    checkpoint_every: Optional[Annotated[int, Field(ge=1)]] = None   # also checkpoint every this many ticks/rounds
    checkpoint_seconds: Optional[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = None   # wall time between checkpoints
    deterministic: bool = False           # torch's deterministic algorithms + atomic-free sparse products
    logger: Optional[Literal["tensorboard"]] = None   # metrics rows as TensorBoard scalars too
    save_models: bool = False             # write the final stacked parameters (models.pt)
    distributed: DistributedConfig = DistributedConfig()
    faults: FaultConfig = FaultConfig()
    adversary: AdversaryConfig = AdversaryConfig()
    privacy: PrivacyConfig = PrivacyConfig()
    clock: ClockConfig = ClockConfig()
    model: ModelConfig = ModelConfig()
    data: DataConfig = DataConfig()
    topology: TopologyConfig = TopologyConfig()
    averaging: Averaging = Averaging()
    algorithm: dict[str, Any] = {}        # _target_ and the algorithm's Params (algorithms.load checks them)

    @property
    def layout(self):
        """The model's :class:`~vecgossip.core.state.Layout` for this data set (built on the meta
        device: no memory), for an algorithm's ``check`` (e.g. that the layers it names exist)."""
        import torch

        from vecgossip.core.state import Layout
        from vecgossip.data.registry import get_spec
        from vecgossip.models import build
        spec = get_spec(self.data.name)
        with torch.device("meta"):
            return Layout.of(build(self.model.name, spec.shape, spec.num_classes, self.model.norm, self.model.width))

    # the short knobs: what sweeps set; the groups read them (their types are the readers')
    on_divergence: Any = "stop"
    nodes: Any = 50
    degree: Any = 8
    t_acq: Any = 10
    R: Any = 1
    beta: Any = 0.5
    correction: Any = False
    alpha: Any = None
    compression: Any = 1.0
    tl: Any = False
    shared_init: Any = False
    broadcast_init: Any = False
    max_ticks: Any = 10_000
    eval_every: Any = 10
    early_stop: Any = False
    data_root: Any = None
    clients: Any = 100
    rounds: Any = 1000
    local_steps: Any = None
    local_epochs: Any = 5
    gossip_steps: Any = 1
    rho: Any = 0.05
    participation: Any = 1.0
    partition: Any = None
    classes_per_client: Any = 2


class TickRun(RunBase):
    """A run on the tick clock (paper 1's methods)."""

    engine: TickOptions = TickOptions()
    optim: SGDConfig = SGDConfig()


class RoundRun(RunBase):
    """A run in synchronous rounds (paper 2's methods)."""

    engine: RoundOptions = RoundOptions()
    optim: LocalSGDConfig = LocalSGDConfig()


RunConfig = Union[TickRun, RoundRun]
ENGINES = {"tick": TickRun, "rounds": RoundRun}
# pass-through: options no part reads itself, only by interpolation into the groups
KNOBS = tuple(f for f in RunBase.model_fields if RunBase.model_fields[f].annotation is Any)
PASS_THROUGH_GROUPS = ("averaging",)
