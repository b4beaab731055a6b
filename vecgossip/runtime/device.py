"""The run's torch device."""
from __future__ import annotations

import torch

from vecgossip.core.errors import ConfigError


def pick_device(name: str) -> torch.device:
    """``cpu`` | ``cuda`` | ``cuda:N`` | ``auto`` (cuda when there is one) as a device; ConfigError if
    a CUDA index is not there."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda"):
        dev = torch.device(name)
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0 or (dev.index or 0) >= count:
            raise ConfigError(f"device={name} but {count} CUDA device(s) are available; use device=cpu or device=auto")
        return dev
    return torch.device(name)
