"""How many nodes one batched forward/backward takes (a chunk), from each model's measured
working-set budget (``ModelDef.cpu_chunk``, ``gpu_images``, ``eval_images``)."""
from __future__ import annotations

import torch

from vecgossip.core.device import gpu_path
from vecgossip.models import get_model


def resolve_chunk(value, device: torch.device, images_per_node: int, model: str = "lenet") -> int:
    """Nodes per chunk: an int as given, or "auto": on a GPU large chunks fill the device; on a CPU
    the model's measured working-set budget (ModelDef.cpu_chunk: small chunks keep a conv net's
    working set in cache; the measurements: benchmarks/RESULTS.md)."""
    if value != "auto":
        return int(value)
    spec = get_model(model)
    images, cap = (spec.gpu_images, 4096) if gpu_path(device) else spec.cpu_chunk
    return max(1, min(cap, images // images_per_node))



def eval_images(model: str, device: torch.device) -> int | None:
    """Images per evaluation forward for the model on the device (ModelDef.eval_images), or None."""
    budget = get_model(model).eval_images
    return None if budget is None else budget[1 if gpu_path(device) else 0]
