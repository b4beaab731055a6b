"""The host side of a device step: which code path a tensor takes (the GPU's or the CPU's), uploads
that do not block the host, and the switch that forces the GPU's paths on a CPU.

On a GPU a small batched step costs its kernel launches and its host syncs, not its FLOPs (DESIGN.md,
"The GPU step and the clock"). Host data that a step needs (the due nodes of a tick, a link list, a
sparse operator's indices) is computed on the host, where it costs no sync, and uploaded with
:func:`upload`: from pinned memory with ``non_blocking`` on CUDA (the copy is queued on the stream
and the host runs on; PyTorch's caching host allocator keeps the pinned block until the copy has
run), a plain ``torch.from_numpy`` on the CPU.

Where the CPU and the GPU take different paths (a numba kernel on the CPU, torch ops on a GPU), the
code asks :func:`gpu_path`. :func:`force_gpu_paths` makes it answer True on a CPU as well, so that
``benchmarks/launches.py`` and the tests count, on a CPU, the launches and syncs of the code a GPU
runs (:mod:`vecgossip.runtime.launches`)."""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import torch

Tensor = torch.Tensor

_FORCED = {"on": False}


@contextmanager
def force_gpu_paths(on: bool = True):
    """Within the block, :func:`gpu_path` answers True for CPU tensors too (counting only: the GPU's
    paths, run by torch on the CPU; kernels that exist only on a GPU run a torch stand-in)."""
    before = _FORCED["on"]
    _FORCED["on"] = bool(on)
    try:
        yield
    finally:
        _FORCED["on"] = before


def forced() -> bool:
    """Whether :func:`force_gpu_paths` is on."""
    return _FORCED["on"]


def gpu_path(where: Tensor | torch.device | str) -> bool:
    """Whether code on ``where`` (a tensor or a device) takes the GPU's path: it is on a GPU, or
    the GPU's paths are forced."""
    dev = where.device if isinstance(where, Tensor) else torch.device(where)
    return dev.type == "cuda" or _FORCED["on"]


def upload(a: np.ndarray | Tensor, device: torch.device | str, dtype: torch.dtype | None = None) -> Tensor:
    """Host data ``a`` on ``device`` without blocking the host: on CUDA a pinned copy queued with
    ``non_blocking``; on the CPU the array itself (``torch.from_numpy``: no copy when ``dtype``
    matches)."""
    t = torch.from_numpy(np.ascontiguousarray(a)) if isinstance(a, np.ndarray) else a
    if dtype is not None and t.dtype != dtype:
        t = t.to(dtype)
    dev = torch.device(device)
    if dev.type == "cpu":
        return t.to(dev, non_blocking=True)       # itself: no copy (and what a launch count reads as an upload)
    return t.pin_memory().to(dev, non_blocking=True)


def with_host(t: Tensor, a: np.ndarray) -> Tensor:
    """``t`` (device indices uploaded from ``a``) carrying its host copy ``a``, so that whoever
    needs the indices on the host later (:func:`host_copy`) reads no device."""
    t._host_copy = a
    return t


def upload_indices(a: np.ndarray, device: torch.device | str) -> Tensor:
    """Host indices ``a`` on ``device`` (:func:`upload`, int64), carrying their host copy."""
    return with_host(upload(np.asarray(a, dtype=np.int64), device), np.asarray(a, dtype=np.int64))


def host_copy(t: Tensor) -> np.ndarray:
    """The host copy of the indices ``t``: the one it carries (:func:`with_host`), else read from
    the device (a host sync: indices made elsewhere)."""
    a = getattr(t, "_host_copy", None)
    return a if a is not None else t.cpu().numpy()
