"""Typed reads of the Hydra config, shared checks, and device/chunk choices. Each check raises
:class:`ConfigError` naming the option as the user types it and what is allowed."""
from __future__ import annotations

import re
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from .models import get_model
from .topology import check

DEVICES = ("cpu", "cuda", "cuda:N", "auto")


class ConfigError(ValueError):
    """An option has a value the simulator cannot run with; the message names it."""


def composition_error(err: BaseException) -> str:
    """Hydra's/OmegaConf's composition error as one line: its first line, and for an unknown group
    option the available ones, comma-separated (the search-path dump left out)."""
    lines = [ln.strip() for ln in str(err).split("Config search path")[0].splitlines() if ln.strip()]
    head, rest = (lines[0], lines[1:]) if lines else (type(err).__name__, [])
    if rest and rest[0].startswith("Available options"):
        rest = [rest[0] + " " + ", ".join(rest[1:])]
    return "; ".join([head, *rest])


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


def resolve_chunk(value, device: torch.device, images_per_node: int, model: str = "lenet") -> int:
    """Nodes per chunk: an int as given, or "auto": on a GPU large chunks fill the device; on a CPU
    the model's measured working-set budget (ModelDef.cpu_chunk). LeNet on this 2-core CPU, train
    B=64: 8.7 ms/node at 4 nodes (256 images) vs 14.6 at 200; B=8: best at 10 nodes; eval of 100
    images: 4.7-4.9 ms/node at 2-5 nodes vs 8.9 at 200 (benchmarks/RESULTS.md)."""
    if value != "auto":
        return int(value)
    spec = get_model(model)
    images, cap = (spec.gpu_images, 4096) if device.type == "cuda" else spec.cpu_chunk
    return max(1, min(cap, images // images_per_node))


def eval_images(model: str, device: torch.device) -> int | None:
    """Images per evaluation forward for the model on the device (ModelDef.eval_images), or None."""
    budget = get_model(model).eval_images
    return None if budget is None else budget[1 if device.type == "cuda" else 0]


def check_device(name) -> str:
    """cpu | cuda | cuda:N | auto (the index is checked when the run starts)."""
    if not isinstance(name, str) or not re.fullmatch(r"cpu|auto|cuda(:\d+)?", name):
        raise ConfigError(f"device={name!r} is unknown; allowed: {', '.join(DEVICES)}")
    return name


def pick_device(name: str) -> torch.device:
    check_device(name)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda"):
        dev = torch.device(name)
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0 or (dev.index or 0) >= count:
            raise ConfigError(f"device={name} but {count} CUDA device(s) are available; use device=cpu or device=auto")
        return dev
    return torch.device(name)


def validate_topology(cfg: DictConfig, allowed: tuple[str, ...], knob: str) -> None:
    """topology.name among ``allowed``; n and k possible for that graph (``knob``: nodes/clients)."""
    get_choice(cfg, "topology.name", allowed)
    n = OmegaConf.select(cfg, "topology.n")
    if isinstance(n, bool) or not isinstance(n, int):
        raise ConfigError(f"topology.n ({knob}) must be an integer, got {n!r}")
    try:
        check(cfg.topology.name, cfg.topology.n, OmegaConf.select(cfg, "topology.k"), knob)
    except ValueError as err:
        raise ConfigError(str(err)) from None
