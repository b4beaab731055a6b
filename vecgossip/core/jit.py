"""numba for the CPU kernels (:mod:`vecgossip.core.row_kernels`,
:mod:`vecgossip.engines.tick.sparse_kernels`): import it from here, so that its parallel loops run
on numba's own thread pool (the ``workqueue`` layer).

numba's OpenMP layer, its default where libgomp is loaded (torch loads it), resets the process's
OpenMP thread count at its first parallel launch, and with it torch's, which changes how MKL
partitions a product and so its rounding: a run's numbers would then depend on whether a numba
kernel had run before (measured: the golden tick recordings moved in their last digits). numba
re-reads its settings from the environment whenever the environment changes, so the choice is made
there (``NUMBA_THREADING_LAYER``; a user's own setting is kept), before numba is imported."""
from __future__ import annotations

import os

os.environ.setdefault("NUMBA_THREADING_LAYER", "workqueue")

import numba as nb  # noqa: E402

nb.config.THREADING_LAYER = os.environ["NUMBA_THREADING_LAYER"]

__all__ = ["nb", "use_torch_threads"]


def use_torch_threads() -> None:
    """numba's threads for the next parallel kernel: torch's budget (``torch.get_num_threads``)."""
    import torch
    nb.set_num_threads(max(1, min(torch.get_num_threads(), nb.config.NUMBA_NUM_THREADS)))
