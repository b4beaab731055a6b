"""Typed options: reading a value from a config and refusing, in one line naming the option, one
that has the wrong type or is out of range. Generic: every part's checks use these."""
from __future__ import annotations

import dataclasses
import typing
from typing import Any

from omegaconf import DictConfig, OmegaConf

from vecgossip.core.errors import ConfigError


def strict(cls: type, value: dict, prefix: str = "") -> None:
    """Every bool option holds true/false, every int option an integer, every float option a
    number (null where the schema allows it), recursively through the groups."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name not in value:
            continue
        v, key, typ = value[f.name], prefix + f.name, hints[f.name]
        args = typing.get_args(typ)
        if typing.get_origin(typ) is typing.Union and type(None) in args:
            if v is None:
                continue
            typ = next(a for a in args if a is not type(None))
        if dataclasses.is_dataclass(typ) and isinstance(v, dict):
            strict(typ, v, key + ".")
        elif typ is bool and not isinstance(v, bool):
            raise ConfigError(f"{key} must be true or false, got {v!r}")
        elif typ is int and (isinstance(v, bool) or not isinstance(v, int)):
            raise ConfigError(f"{key} must be an integer, got {v!r}")
        elif typ is float and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise ConfigError(f"{key} must be a number, got {v!r}")


def get_int(cfg: DictConfig, key: str, minimum: int, knob: str | None = None) -> int:
    """An integer >= minimum; ``knob``: the short name users type for it (clients, nodes, ...)."""
    v = OmegaConf.select(cfg, key)
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ConfigError(f"{key}{f' ({knob})' if knob else ''} must be an integer >= {minimum}, got {v!r}")
    return v


def get_num(cfg: DictConfig, key: str, lo: float, hi: float, lo_open: bool = False, hi_open: bool = False) -> float:
    v = OmegaConf.select(cfg, key)
    ok = (not isinstance(v, bool) and isinstance(v, (int, float))
          and (lo < v if lo_open else lo <= v) and (v < hi if hi_open else v <= hi))
    if not ok:
        raise ConfigError(f"{key} must be a number in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}, "
                          f"got {v!r}")
    return float(v)


def get_choice(cfg: DictConfig, key: str, allowed) -> Any:
    v = OmegaConf.select(cfg, key)
    if v not in allowed:
        raise ConfigError(f"{key}={v!r} is unknown; allowed: {', '.join(map(str, allowed))}")
    return v


def get_bool(cfg: DictConfig, key: str) -> bool:
    v = OmegaConf.select(cfg, key)
    if not isinstance(v, bool):
        raise ConfigError(f"{key} must be true or false, got {v!r}")
    return v


def get_alpha(cfg: DictConfig, key: str = "data.alpha") -> float | None:
    alpha = OmegaConf.select(cfg, key)
    if alpha is not None and (isinstance(alpha, bool) or not isinstance(alpha, (int, float))
                              or not 0 < alpha < float("inf")):
        raise ConfigError(f"{key} (alpha) must be null (IID) or a number > 0, got {alpha!r}")
    return alpha
