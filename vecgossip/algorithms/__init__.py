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

from vecgossip.algorithms.base import (Algorithm, Block, NoParams, PerEdge, PerNode, Requires, RoundAlgorithm,
                                       RoundServices, Streams, TickAlgorithm, TickServices)
from vecgossip.core.state import Layer

__all__ = ["Algorithm", "Block", "Layer", "NoParams", "PerEdge", "PerNode", "Requires", "RoundAlgorithm",
           "RoundServices", "Streams", "TickAlgorithm", "TickServices", "load"]


def _in_words(annotation: str) -> str:
    """A Params field's annotation as a user reads it: ``float | None`` -> ``a number or null``."""
    words = {"float": "a number", "int": "an integer", "bool": "true or false", "str": "a string",
             "None": "null", "Optional": ""}
    parts = [p.strip() for p in annotation.replace("Optional[", "").replace("]", "").split("|")]
    named = [words.get(p, p) for p in parts if p]
    return " or ".join(dict.fromkeys(n for n in named if n)) or "of its declared type"


def load(node) -> Algorithm:
    """The algorithm a config's ``algorithm`` node names, its hyperparameters checked against its
    ``Params`` dataclass (OmegaConf: an unknown key or a wrong type is refused). Raises
    :class:`~vecgossip.config.ConfigError` in one line: a target that cannot be imported, is not
    an :class:`Algorithm`, or parameters it does not take. Nothing falls back."""
    import dataclasses

    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from vecgossip.core.errors import ConfigError
    from vecgossip.core.options import did_you_mean, strict
    if not isinstance(node, DictConfig) or not node.get("_target_"):
        raise ConfigError("algorithm._target_ is not set: a method preset (method=...) or algorithm=... "
                          "names the algorithm's class by its dotted path")
    from vecgossip.core.imports import import_target      # the loader's own step, not part of the API
    target = node._target_
    cls = import_target(target, "algorithm._target_")
    if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
        raise ConfigError(f"algorithm._target_={target} is not a vecgossip.algorithms.Algorithm subclass")
    if not dataclasses.is_dataclass(cls.Params):
        raise ConfigError(f"algorithm._target_={target}: its Params must be a dataclass")
    given = OmegaConf.to_container(node, resolve=True)
    given.pop("_target_")
    fields = [f.name for f in dataclasses.fields(cls.Params)]
    unknown = [k for k in given if k not in fields]
    if unknown:
        raise ConfigError(f"unknown option algorithm.{unknown[0]}; {target} takes: {', '.join(fields) or 'nothing'}"
                          + did_you_mean(unknown[0], fields))
    strict(cls.Params, given, "algorithm.")
    types = {f.name: f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
             for f in dataclasses.fields(cls.Params)}
    try:
        params = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls.Params), given))
    except OmegaConfBaseException as err:   # a value of the wrong type (OmegaConf's, first: it is a ValueError too)
        key = getattr(err, "full_key", None) or getattr(err, "key", None)
        if key in given:
            raise ConfigError(f"algorithm.{key} must be {_in_words(types.get(key, ''))}, "
                              f"got {given[key]!r} ({target})") from None
        msg = str(err).split("\n", 1)[0]
        raise ConfigError(f"algorithm: {msg} ({target} takes: {', '.join(fields)})") from None
    except ValueError as err:          # the Params' own checks (its __post_init__), named as options
        msg = str(err).split("\n", 1)[0]
        raise ConfigError(f"algorithm.{msg}" if msg.split(" ", 1)[0] in fields else f"algorithm: {msg}") from None
    try:
        return cls(params)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"algorithm ({target}): {err}") from None


