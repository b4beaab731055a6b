"""Typed reads of the Hydra config, shared checks, and device/chunk choices. Each check raises
:class:`ConfigError` naming the option as the user types it and what is allowed."""
from __future__ import annotations

from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from .models import get_model
from .topology import check

DEVICES = ("cpu", "cuda", "auto")


class ConfigError(ValueError):
    """An option has a value the simulator cannot run with; the message names it."""


def get_int(cfg: DictConfig, key: str, minimum: int) -> int:
    v = OmegaConf.select(cfg, key)
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ConfigError(f"{key} must be an integer >= {minimum}, got {v!r}")
    return v


def get_num(cfg: DictConfig, key: str, lo: float, hi: float, lo_open: bool = False) -> float:
    v = OmegaConf.select(cfg, key)
    ok = (not isinstance(v, bool) and isinstance(v, (int, float))
          and (lo < v if lo_open else lo <= v) and v <= hi)
    if not ok:
        raise ConfigError(f"{key} must be a number in {'(' if lo_open else '['}{lo}, {hi}], got {v!r}")
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
    if alpha is not None and (isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha <= 0):
        raise ConfigError(f"{key} (alpha) must be null (IID) or a number > 0, got {alpha!r}")
    return alpha


def resolve_chunk(value, device: torch.device, images_per_node: int, model: str = "lenet") -> int:
    """Nodes per chunk: an int as given, or "auto": on a GPU large chunks fill the device; on a CPU
    the model's measured working-set budget (ModelDef.cpu_chunk). LeNet on this 2-core CPU, train
    B=64: 8.7 ms/node at 4 nodes (256 images) vs 14.6 at 200; B=8: best at 10 nodes; eval of 100
    images: 4.7-4.9 ms/node at 2-5 nodes vs 8.9 at 200 (benchmarks/RESULTS.md)."""
    if value != "auto":
        return int(value)
    images, cap = (1 << 16, 4096) if device.type == "cuda" else get_model(model).cpu_chunk
    return max(1, min(cap, images // images_per_node))


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device=cuda but no CUDA device is available; use device=cpu or device=auto")
    return torch.device(name)


def validate_topology(cfg: DictConfig, allowed: tuple[str, ...], knob: str) -> None:
    """topology.name among ``allowed``; n and k possible for that graph (``knob``: nodes/clients)."""
    get_choice(cfg, "topology.name", allowed)
    get_int(cfg, "topology.n", 1)
    try:
        check(cfg.topology.name, cfg.topology.n, OmegaConf.select(cfg, "topology.k"), knob)
    except ValueError as err:
        raise ConfigError(str(err)) from None
