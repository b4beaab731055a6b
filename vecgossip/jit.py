"""numba, configured once for this package's CPU kernels (compress.py, models/pool.py).

numba runs on its own ``workqueue`` thread pool: its OpenMP layer would reset the process's OpenMP
thread count, and with it torch's (measured: 1 -> 2 after the first launch), which changes torch's
reductions. Each launch uses as many numba threads as torch has (torch's thread budget).
Imported lazily by the kernels' modules, so the GPU path and the rest of the package do not need
numba's JIT.
"""
from __future__ import annotations

import torch


def numba():
    """The numba module with the workqueue threading layer selected (before its first parallel launch)."""
    import numba as nb
    nb.config.THREADING_LAYER = "workqueue"
    return nb


def torch_threads() -> None:
    """numba's threads for the next launch: torch's count (capped by numba's pool)."""
    nb = numba()
    nb.set_num_threads(max(1, min(torch.get_num_threads(), nb.config.NUMBA_NUM_THREADS)))
