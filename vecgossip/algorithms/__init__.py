"""Algorithms: one file per algorithm of the papers, on the public interface of :mod:`.base`.

Round engine (paper 2, Shi et al. ICML 2023): :mod:`.dpsgd` (D-PSGD), :mod:`.dfedavg` (DFedAvg;
DFedAvgM is its preset with momentum 0.9), :mod:`.dfedsam` (DFedSAM, Algorithm 1; DFedSAM-MGS,
Algorithm 2, is its preset with Q = 4 gossip steps), :mod:`.fedavg` (FedAvg; FedSAM is its preset
with SAM local steps). Tick engine (paper 1, Tian et al.): :mod:`.gossip` (Algorithm 2 with
Eq. 1; its send rule (weight compression, III-C2), merge rule (Eq. 1, + Algorithm 3's variance
correction) and peer rule (transfer learning, III-C3) compose: presets gossip, vc, compression,
tl, tl_compression), :mod:`.fedavg_tick` (Algorithm 1, a FedAvg relay server on a star).
The field's baselines: :mod:`.choco`, :mod:`.gradient_tracking`, :mod:`.qgm`, :mod:`.sgp`,
:mod:`.epidemic` (round engine), :mod:`.adpsgd`; in virtual seconds only (clock.enabled=true),
:mod:`.gossip_timers`, :mod:`.swift` and :mod:`.divshare`.

A run's algorithm is the config node ``algorithm``: ``_target_`` (the class's dotted path, a
user's own package works the same) and its ``Params`` fields; :func:`load` builds it."""
from __future__ import annotations

from vecgossip.algorithms.base import (Algorithm, Block, NoParams, PerEdge, PerNode, Requires, RoundAlgorithm,
                                       RoundServices, Streams, TickAlgorithm, TickServices)
from vecgossip.core.state import Layer

__all__ = ["Algorithm", "Block", "Layer", "NoParams", "PerEdge", "PerNode", "Requires", "RoundAlgorithm",
           "RoundServices", "Streams", "TickAlgorithm", "TickServices", "load"]


def load(node) -> Algorithm:
    """The algorithm a config's ``algorithm`` node names, its hyperparameters checked against its
    ``Params`` dataclass (OmegaConf: an unknown key or a wrong type is refused). Raises
    :class:`~vecgossip.config.ConfigError` in one line: a target that cannot be imported, is not
    an :class:`Algorithm`, or parameters it does not take. Nothing falls back."""
    import dataclasses

    from omegaconf import DictConfig, OmegaConf

    from vecgossip.core.errors import ConfigError
    from vecgossip.core.options import dataclass_params
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
    params = dataclass_params(cls.Params, given, "algorithm", target)
    try:
        return cls(params)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"algorithm ({target}): {err}") from None


