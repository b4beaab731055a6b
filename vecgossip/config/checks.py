"""Typed reads of the Hydra config, shared checks, and device/chunk choices. Each check raises
:class:`ConfigError` naming the option as the user types it and what is allowed."""
from __future__ import annotations

import re

import torch
from omegaconf import DictConfig, OmegaConf

from vecgossip.core.errors import ConfigError
from vecgossip.core.options import get_choice
from vecgossip.models import get_model
from vecgossip.network.topology import check

DEVICES = ("cpu", "cuda", "cuda:N", "auto")


def composition_error(err: BaseException) -> str:
    """Hydra's/OmegaConf's composition error as one line: its first line, and for an unknown group
    option the available ones, comma-separated (the search-path dump left out)."""
    lines = [ln.strip() for ln in str(err).split("Config search path")[0].splitlines() if ln.strip()]
    head, rest = (lines[0], lines[1:]) if lines else (type(err).__name__, [])
    if rest and rest[0].startswith("Available options"):
        rest = [rest[0] + " " + ", ".join(rest[1:])]
    return "; ".join([head, *rest])


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
