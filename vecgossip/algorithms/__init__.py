"""Algorithms: one file per algorithm of the papers, on the public interface of :mod:`.base`.

Round engine (paper 2, Shi et al. ICML 2023): :mod:`.dpsgd` (D-PSGD), :mod:`.dfedavg` (DFedAvg;
DFedAvgM is its preset with momentum 0.9), :mod:`.dfedsam` (DFedSAM, Algorithm 1; DFedSAM-MGS,
Algorithm 2, is its preset with Q = 4 gossip steps), :mod:`.fedavg` (FedAvg; FedSAM is its preset
with SAM local steps). Tick engine (paper 1, Tian et al.): :mod:`.gossip` (Algorithm 2 with
Eq. 1; its send rule (weight compression, III-C2), merge rule (Eq. 1, + Algorithm 3's variance
correction) and peer rule (transfer learning, III-C3) compose: presets gossip, vc, compression,
tl, tl_compression), :mod:`.fedavg_tick` (Algorithm 1, a FedAvg relay server on a star).

A run's algorithm is the config node ``algorithm``: ``_target_`` (the class's dotted path, a
user's own package works the same) and its ``Params`` fields; :func:`load` builds it."""
from __future__ import annotations

from vecgossip.algorithms.base import (Algorithm, NoParams, PerNode, RoundAlgorithm, RoundServices, Streams,
                                       TickAlgorithm, TickServices)

__all__ = ["Algorithm", "NoParams", "PerNode", "RoundAlgorithm", "RoundServices", "Streams", "TickAlgorithm",
           "TickServices", "load", "load_for"]


def load(node) -> Algorithm:
    """The algorithm a config's ``algorithm`` node names, its hyperparameters checked against its
    ``Params`` dataclass (OmegaConf: an unknown key or a wrong type is refused). Raises
    :class:`~vecgossip.config.ConfigError` in one line: a target that cannot be imported, is not
    an :class:`Algorithm`, or parameters it does not take. Nothing falls back."""
    import dataclasses

    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from vecgossip.core.errors import ConfigError
    if not isinstance(node, DictConfig) or not node.get("_target_"):
        raise ConfigError("algorithm._target_ is not set: a method preset (method=...) or algorithm=... "
                          "names the algorithm's class by its dotted path")
    target = node._target_
    cls = import_target(target, "algorithm._target_")
    if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
        raise ConfigError(f"algorithm._target_={target} is not a vecgossip.algorithms.Algorithm subclass")
    if not dataclasses.is_dataclass(cls.Params):
        raise ConfigError(f"algorithm._target_={target}: its Params must be a dataclass")
    given = OmegaConf.to_container(node, resolve=True)
    given.pop("_target_")
    try:
        params = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls.Params), given))
        from vecgossip.core.options import strict
        strict(cls.Params, given, "algorithm.")
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or getattr(err, "key", None)
        fields = ", ".join(f.name for f in dataclasses.fields(cls.Params)) or "none"
        msg = str(err).split("\n", 1)[0]
        raise ConfigError(f"algorithm.{key}: {msg} ({target} takes: {fields})" if key
                          else f"algorithm: {msg} ({target} takes: {fields})") from None
    try:
        return cls(params)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"algorithm ({target}): {err}") from None


def load_for(cfg, engine: str) -> Algorithm:
    """The run's algorithm (config node ``algorithm``), refused in one line unless it runs on
    ``engine`` and accepts the configuration (its :meth:`~Algorithm.check`)."""
    from vecgossip.core.errors import ConfigError
    algo = load(cfg.algorithm)
    if algo.engine != engine:
        raise ConfigError(f"algorithm._target_={algo.name()} runs on the {algo.engine} engine, but the config "
                          f"selects engine={cfg.engine.name}: its method preset must select engine={algo.engine}")
    try:
        algo.check(cfg)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    return algo


def import_target(target: str, option: str):
    """The object a dotted path names (module.attr[.attr...]); ConfigError naming ``option`` if it
    cannot be imported. (hydra.utils.get_object would do the lookup, but it logs a three-line
    error to stderr before raising: the CLI's bad-input answer must stay one line.)"""
    import importlib

    from vecgossip.core.errors import ConfigError
    if not isinstance(target, str) or "." not in target:
        raise ConfigError(f"{option}={target!r} must be a dotted path such as mypkg.module.ClassName")
    parts = target.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as err:
            if err.name is not None and not ".".join(parts[:cut]).startswith(err.name):
                raise ConfigError(f"{option}={target} cannot be imported: {err}") from None
            continue
        except Exception as err:   # noqa: BLE001 - the user's module raised while importing
            raise ConfigError(f"{option}={target} cannot be imported: {type(err).__name__}: {err}") from None
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            raise ConfigError(f"{option}={target} cannot be imported: module {'.'.join(parts[:cut])!r} "
                              f"has no {'.'.join(parts[cut:])!r}") from None
        return obj
    raise ConfigError(f"{option}={target} cannot be imported: no module named {parts[0]!r}")
