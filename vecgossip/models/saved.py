"""A run's final models on disk (``save_models=true``: ``models.pt``) and back as plain modules."""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from vecgossip.core.files import atomic_path
from vecgossip.core.state import Layout, new_state, to_modules


def save_models(path: Path, model: str, in_shape, num_classes: int, theta, norm: str | None = None) -> None:
    """The final stacked parameters (N, P) (and running statistics) with what rebuilds them:
    :func:`load_models`."""
    import torch
    with atomic_path(path) as tmp:
        torch.save({"model": model, "in_shape": tuple(in_shape), "num_classes": int(num_classes), "norm": norm,
                    "theta": theta.detach().cpu()}, tmp)


def load_models(path) -> list[nn.Module]:
    """The N plain ``nn.Module``s of a run written with ``save_models=true`` (``models.pt`` in its
    run directory): ``mods = load_models("outputs/DATE/TIME/models.pt"); mods[3](x)``."""
    from vecgossip.models import build
    blob = torch.load(path, weights_only=False, map_location="cpu")
    factory = lambda: build(blob["model"], blob["in_shape"], blob["num_classes"], blob.get("norm"))  # noqa: E731
    return to_modules(new_state(Layout.of(factory()), blob["theta"]), factory)
