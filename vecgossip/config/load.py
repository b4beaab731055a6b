"""The one boundary between the composed config and the code (issue 36): :func:`load` turns
Hydra's ``DictConfig`` into typed objects (:mod:`vecgossip.config.schema`) and the algorithm it
names, checks every cross-field rule (:mod:`vecgossip.config.rules`) and whether the run fits in
memory, and raises :class:`~vecgossip.core.errors.ConfigError` with one line naming the option as
the user typed it. Composition and engines receive what it returns, never the ``DictConfig``."""
from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import ValidationError

from vecgossip.algorithms import Algorithm, load as load_algorithm
from vecgossip.config import rules
from vecgossip.config.knobs import annotate, typed_names
from vecgossip.config.schema import ENGINES, RunBase, RunConfig
from vecgossip.core.errors import ConfigError
from vecgossip.core.options import one_line, validate_field
from vecgossip.runtime import replicas


@dataclass
class Run:
    """One simulation, validated: ``cfg`` its typed config, ``algorithm`` the algorithm it names,
    ``raw`` the composed config it came from (recorded in summary.json and checkpoints)."""

    cfg: RunConfig
    algorithm: Algorithm
    raw: DictConfig

    @property
    def resolved(self) -> dict:
        """The config as plain values (what summary.json records and a checkpoint is keyed by)."""
        return OmegaConf.to_container(self.raw, resolve=True)


@dataclass
class Plan:
    """What a config asks for: one :class:`Run`, or one per replica (``replicas=S``)."""

    runs: list[Run]
    raw: DictConfig
    overrides: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)    # what the loader changed, logged at the start

    @property
    def first(self) -> Run:
        return self.runs[0]

    @property
    def resolved(self) -> dict:
        """The whole config (replicas' lists included) as plain values."""
        return OmegaConf.to_container(self.raw, resolve=True)


def load(cfg: DictConfig, overrides: list[str] = (), world: int = 1) -> Plan:
    """Validate ``cfg`` (``overrides``: the command line's, to refuse knobs the chosen parts would
    ignore; ``world``: torchrun processes) into a :class:`Plan`; ConfigError if anything is wrong."""
    import_plugins(cfg)
    engine = OmegaConf.select(cfg, "engine.name")
    if engine not in ENGINES:
        raise ConfigError(f"engine.name={engine!r} is unknown; allowed: {', '.join(ENGINES)}")
    for key in ("seed", "replicas"):                 # what the replicas' configs are made from
        validate_field(RunBase, key, OmegaConf.select(cfg, key))
    note = cap_default_degree(cfg, overrides)
    runs = [load_one(one, list(overrides)) for one in replicas.expand(cfg)]
    plan = Plan(runs, cfg, list(overrides), [note] if note else [])
    rules.check_plan(plan, world)
    return plan


def load_one(cfg: DictConfig, overrides: list[str]) -> Run:
    """One replica's config: typed, its algorithm loaded, every rule checked."""
    typed = typed_names(cfg)
    plain = resolved(cfg)
    root = ENGINES[plain["engine"]["name"]]
    try:
        options = root.model_validate(plain)
    except ValidationError as err:
        raise ConfigError(annotate(one_line(err, root), typed)) from None
    try:
        algorithm = load_algorithm(cfg.algorithm)
    except ConfigError as err:
        raise ConfigError(annotate(str(err), typed)) from None
    run = Run(options, algorithm, cfg)
    try:
        rules.check_run(run, overrides)
    except ValueError as err:
        raise ConfigError(annotate(str(err), typed) + preset_hint(str(err), cfg, overrides)) from None
    return run


def cap_default_degree(cfg: DictConfig, overrides: list[str]) -> str | None:
    """A method preset's default degree (``method=dpsgd``: 10) on a graph of no more nodes than
    that (``clients=8``) becomes n - 1, every other node (the complete graph's degree), with a
    line saying so; a degree the command line sets is never changed (refused if too large), nor
    one of a config given without its command line (``overrides`` empty: who set it is unknown)."""
    if not overrides or any(k in given_keys(overrides) for k in ("degree", "topology.k")):
        return None
    try:
        n, k, name = (OmegaConf.select(cfg, key) for key in ("topology.n", "topology.k", "topology.name"))
    except Exception:   # noqa: BLE001 - an unresolvable value is the validator's to report
        return None
    from vecgossip.network.topology import REGISTRY
    entry = REGISTRY.get(name) if isinstance(name, str) else None
    if entry is None or not entry.degree or not isinstance(n, int) or not isinstance(k, int) or not 2 <= n <= k:
        return None
    OmegaConf.update(cfg, "topology.k", n - 1, force_add=True)
    return (f"topology.k={k} is the default degree of method={cfg.get('method_name')}; with topology.n={n} it is "
            f"{n - 1} (every other node): set degree=... to choose")


def preset_hint(message: str, cfg: DictConfig, overrides: list[str]) -> str:
    """Where a refused topology.k came from when the command line did not set it: the method's
    preset (``method=dpsgd clients=8``: its degree 10), and how to set it."""
    if "topology.k" not in message or any(k in given_keys(overrides) for k in ("degree", "topology.k")):
        return ""
    k = OmegaConf.select(cfg, "topology.k")
    return (f"; topology.k={k} is the default degree of method={cfg.get('method_name')}: set degree=... "
            f"(or topology=ring, ...)")


def given_keys(overrides: list[str]) -> list[str]:
    return [o.split("=", 1)[0].lstrip("+~") for o in overrides if "=" in o]


def resolved(cfg: DictConfig) -> dict:
    """The config as plain values (interpolations resolved), without Hydra's own node."""
    try:
        plain = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None)
        msg = str(err).split("\n", 1)[0].strip()
        raise ConfigError(f"{key}: {msg}" if key else msg) from None
    plain.pop("hydra", None)
    return plain


def import_plugins(cfg: DictConfig) -> None:
    """``plugins=[mypkg, ...]``: import the user's modules first, so that what they register
    (vecgossip.register_dataset, ...) exists before anything is checked; one line if one cannot be
    imported."""
    mods = OmegaConf.select(cfg, "plugins", default=[]) or []
    if isinstance(mods, str) or not all(isinstance(m, str) for m in mods):
        raise ConfigError(f"plugins must be a list of module names, e.g. plugins=[mypkg], got {mods!r}")
    for mod in mods:
        try:
            importlib.import_module(mod)
        except Exception as err:   # noqa: BLE001 - whatever the user's module raised
            raise ConfigError(f"plugins: {mod} cannot be imported: {type(err).__name__}: {err}") from None


def composition_error(err: BaseException, recompose=None) -> str:
    """Hydra's/OmegaConf's composition error as one line: an override of a key no config has
    answered in our words (the group's options and the closest one: for an algorithm's key,
    ``recompose(key)`` composes the config without it, to name what its algorithm takes); for an
    unknown group option the available ones, comma-separated (the search-path dump left out)."""
    unknown = re.search(r"Could not override '([\w.]+)'", str(err))
    if unknown:
        key = unknown.group(1)
        if key.startswith("algorithm.") and recompose is not None:
            told = algorithm_takes(key, recompose)
            if told:
                return told
        return unknown_option(key, recompose)
    missing = re.search(r"Could not find '([\w/]+)/([^'/]*)'", str(err))
    options = re.search(r"Available options in '[\w/]+':\s*(.*?)(?:Config search path|$)", str(err), re.S)
    if missing and options:                  # a group's choice misspelled: ours, one line, the closest first
        from vecgossip.core.options import did_you_mean
        group, choice = missing.group(1), missing.group(2)
        names = [n.strip() for n in options.group(1).replace(",", " ").split() if n.strip()]
        said = f"{group}={choice} is unknown{did_you_mean(choice, names)}" if choice else f"{group}= needs a value"
        return f"{said}; allowed: {', '.join(names)}"
    lines = [ln.strip() for ln in str(err).split("Config search path")[0].splitlines() if ln.strip()]
    head, rest = (lines[0], lines[1:]) if lines else (type(err).__name__, [])
    if rest and rest[0].startswith("Available options"):
        rest = [rest[0] + " " + ", ".join(rest[1:])]
    return "; ".join([head, *rest])


def algorithm_takes(key: str, recompose) -> str | None:
    """``unknown option algorithm.tauu; <its class> takes: tau (did you mean tau?)``, from the
    config composed without the unknown key (None when that fails too)."""
    import dataclasses

    from vecgossip.core.imports import import_target
    from vecgossip.core.options import did_you_mean
    try:
        target = recompose(key).algorithm._target_
        fields = [f.name for f in dataclasses.fields(import_target(target, "algorithm._target_").Params)]
    except Exception:                        # the config does not compose without it either: say less
        return None
    word = key.split(".", 1)[1]
    return f"unknown option {key}; {target} takes: {', '.join(fields) or 'nothing'}{did_you_mean(word, fields)}"


def unknown_option(key: str, recompose=None) -> str:
    """``unknown option optim.lrr; optim takes: lr, momentum, ... (did you mean lr?)``: the options
    of the group ``key`` names, as the schema declares them (either engine's). An option the
    schema has but this run's composition does not (the other engine's, e.g.
    ``data.global_test_size`` with a tick method) says so: ``recompose(key)`` names the engine."""
    from vecgossip.core.options import did_you_mean, model_at
    parent, _, word = key.rpartition(".")
    names: list[str] = []
    for root in ENGINES.values():
        owner = model_at(root, parent.split(".")) if parent else root
        names += [n for n in (owner.model_fields if owner is not None else ()) if n not in names]
    if parent == "data":
        from vecgossip.data.config import DataConfig
        field_ = DataConfig.model_fields.get(word)
        if field_ is not None and (field_.json_schema_extra or {}).get("data") == "text":
            return f"{key} applies to text data only (data=shakespeare), not the data set chosen here"
    if parent == "model" and word == "width":
        from vecgossip.models import MODELS
        return (f"{key} applies to the models that take a width only: "
                f"{', '.join(n for n, m in MODELS.items() if m.width is not None)}")
    if word in names and recompose is not None:
        try:
            cfg = recompose(key)
            engine, method = cfg.engine.name, cfg.get("method_name", "?")
        except Exception:                    # the config does not compose without it either: say less
            engine = None
        if engine is not None:
            other = next((e for e in ENGINES if e != engine), "other")
            return f"{key} is not read on the {engine} engine (method={method}); it is the {other} engine's option"
    if not parent and word not in names:     # a group's option typed at the top level: name its full key
        full = [f"{g}.{word}" for g in names if (m := model_at(next(iter(ENGINES.values())), [g])) is not None
                and word in m.model_fields]
        full += [f"{g}.{word}" for g in names if f"{g}.{word}" not in full and any(
            (m := model_at(r, [g])) is not None and word in m.model_fields for r in ENGINES.values())]
        if full:
            return f"unknown option {word}; did you mean {' or '.join(full)}?"
    if parent == "adversary.params":
        return (f"{key}: an attack's own options are new keys to the config: write +{key}=... (the attack's "
                "Params dataclass checks them)")
    if parent == "algorithm" or parent.startswith("algorithm."):
        return f"unknown option {key}: the method's algorithm does not declare it (its Params list its options)"
    takes = f"; {parent or 'the top level'} takes: {', '.join(names)}" if names else ""
    return f"unknown option {key}{takes}{did_you_mean(word, names)}"
