"""The config's schema: one dataclass per group, mirroring the module that reads it, so that
OmegaConf refuses an unknown key or a value of the wrong type wherever it came from (the command
line, a preset's YAML, a plug-in's YAML) with one line naming the option. Range checks a type
cannot express stay beside their part (compose/, core/optim.py, core/faults.py, the algorithm's Params).

The algorithm node is checked against the algorithm's own ``Params`` (:func:`vecgossip.algorithms.load`);
``hydra`` is Hydra's."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from vecgossip.core.errors import ConfigError
from vecgossip.core.options import strict
from vecgossip.core.faults import FaultConfig
from vecgossip.core.optim import LocalSGDConfig, SGDConfig


@dataclass
class Model:                 # models/
    name: str = "lenet"
    impl: str = "explicit"
    exec: str = "auto"
    init: str = "caffe_xavier"
    shared_init: bool = False
    broadcast_init: bool = False
    norm: Optional[str] = None
    average_buffers: Optional[bool] = None


@dataclass
class Data:                  # datasets.py, data.py (tick), partition.py (rounds)
    name: str = "mnist"
    root: Optional[str] = None
    download: bool = True
    alpha: Optional[float] = None
    batch_size: int = 64
    eval_set: str = "fixed100"
    local_eval_size: int = 100
    sampler: str = "label_mix"
    augment: bool = True
    partition: Optional[str] = None
    classes_per_client: Optional[int] = None
    min_samples: Optional[int] = None
    local_test_size: Optional[int] = None
    global_test_size: Optional[int] = None


@dataclass
class Topology:              # topology.py
    name: str = "regular"
    n: int = 50
    k: Optional[int] = None


@dataclass
class Averaging:             # buffer.py, correction.py, compress.py
    R: int = 1
    beta: float = 0.5
    correction: bool = False
    compression: float = 1.0


@dataclass
class TL:                    # peers.py
    enabled: bool = False
    period: int = 50
    add_at: float = 0.8
    drop_at: float = 0.2
    samples: int = 100


@dataclass
class TickEngine:            # engines/tick.py
    name: str = "tick"
    t_acq: Any = 10                      # an int, or [lo, hi]
    max_ticks: int = 10_000
    eval_every: int = 10
    early_stop: bool = False
    threshold: float = 0.9
    most_frac: float = 0.9
    eval_chunk: Any = "auto"             # auto or an int
    train_chunk: Any = "auto"
    on_divergence: str = "stop"
    malloc: str = "tuned"
    tl: TL = field(default_factory=TL)


@dataclass
class RoundEngine:           # engines/rounds.py
    name: str = "rounds"
    rounds: int = 1000
    local_steps: Optional[int] = None
    local_epochs: Optional[int] = 5
    gossip_steps: Any = 1                # an int >= 1 (checked with its knob's name)
    participation: float = 1.0
    eval_every: int = 10
    train_chunk: Any = "auto"
    eval_chunk: Any = "auto"
    on_divergence: str = "stop"
    malloc: str = "tuned"


@dataclass
class Distributed:           # shard.py
    enabled: Any = "auto"                # auto | true | false
    backend: str = "auto"
    exchange: str = "all_to_all"


@dataclass
class Faults:                # faults.py (the fields of FaultConfig)
    drop: float = 0.0
    offline: float = 0.0
    crash_at: Optional[int] = None
    rejoin_at: Optional[int] = None
    crash_nodes: list[int] = field(default_factory=list)
    timeout: int = 30


@dataclass
class Root:                  # config.yaml: run control and the short knobs the groups read
    name: str = "baseline"
    plugins: list[str] = field(default_factory=list)
    method_name: str = "gossip"
    seed: int = 0
    replicas: int = 1
    device: str = "cpu"
    precision: str = "fp32"
    progress: bool = True
    compare: Optional[list[str]] = field(default_factory=list)
    compare_ticks: int = 1000
    resume: Any = "auto"                 # auto | true | false | a path
    checkpoint_every: Optional[int] = None
    checkpoint_seconds: Optional[float] = None
    deterministic: bool = False
    logger: Optional[str] = None
    save_models: bool = False
    on_divergence: str = "stop"
    nodes: int = 50
    degree: Optional[int] = 8
    t_acq: Any = 10
    R: int = 1
    beta: float = 0.5
    correction: bool = False
    alpha: Optional[float] = None
    compression: float = 1.0
    tl: bool = False
    shared_init: bool = False
    broadcast_init: bool = False
    max_ticks: int = 10_000
    eval_every: int = 10
    early_stop: bool = False
    data_root: Optional[str] = None
    clients: int = 100
    rounds: int = 1000
    local_steps: Optional[int] = None
    local_epochs: Optional[int] = 5
    gossip_steps: Any = 1
    rho: float = 0.05
    participation: float = 1.0
    partition: Optional[str] = None
    classes_per_client: int = 2
    distributed: Distributed = field(default_factory=Distributed)
    faults: Faults = field(default_factory=Faults)
    model: Model = field(default_factory=Model)
    data: Data = field(default_factory=Data)
    topology: Topology = field(default_factory=Topology)
    averaging: Averaging = field(default_factory=Averaging)


def _optim_schema(cls) -> type:
    """The optimiser's own config dataclass (optim.py) as a plain schema (no __post_init__ checks:
    those run when the optimiser is built)."""
    return dataclasses.make_dataclass(f"{cls.__name__}Schema",
                                      [(f.name, f.type, field(default=f.default)) for f in dataclasses.fields(cls)])


OPTIM = {"tick": _optim_schema(SGDConfig), "rounds": _optim_schema(LocalSGDConfig)}
ENGINE = {"tick": TickEngine, "rounds": RoundEngine}
SCHEMAS = {name: dataclasses.make_dataclass(f"Root_{name}", [("engine", ENGINE[name], field(default_factory=ENGINE[name])),
                                                              ("optim", OPTIM[name], field(default_factory=OPTIM[name]))],
                                            bases=(Root,)) for name in ENGINE}
assert {f.name for f in dataclasses.fields(FaultConfig)} == {f.name for f in dataclasses.fields(Faults)}


def check(cfg: DictConfig) -> None:
    """Refuse, in one line, a key the schema does not have or a value of the wrong type. Stricter
    than OmegaConf's conversions, which would take ``no`` or ``1`` for a bool and ``"5"`` for an
    int (:func:`strict`): a typed option holds a value of its type as written."""
    engine = OmegaConf.select(cfg, "engine.name")
    if engine not in ENGINE:
        raise ConfigError(f"engine.name={engine!r} is not available; allowed: {', '.join(ENGINE)}")
    with_groups = OmegaConf.structured(SCHEMAS[engine])
    try:
        plain = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as err:
        raise ConfigError(_line(err)) from None
    for key in ("algorithm", "hydra"):
        plain.pop(key, None)
    try:
        OmegaConf.merge(with_groups, plain)
    except OmegaConfBaseException as err:
        raise ConfigError(_line(err, with_groups)) from None
    strict(SCHEMAS[engine], plain)


def _line(err: OmegaConfBaseException, schema: DictConfig | None = None) -> str:
    key = getattr(err, "full_key", None)
    msg = str(err).split("\n", 1)[0].strip()
    if key and ("not in struct" in msg or "not in '" in msg):
        parent = key.rsplit(".", 1)[0] if "." in key else ""
        node = OmegaConf.select(schema, parent) if parent and schema is not None else schema
        allowed = f"; {parent or 'the top level'} takes: {', '.join(node.keys())}" if isinstance(node, DictConfig) else ""
        return f"unknown option {key}: nothing reads it (a typo in a preset or on the command line?){allowed}"
    return f"{key}: {msg}" if key else msg
