"""glibc malloc settings for CPU runs: keep freed workspace in the heap.

Every training and evaluation chunk allocates and frees the same few-MB blocks (activations,
max-pool indices, gradient temporaries). Under glibc's defaults such blocks are mmap'ed and
unmapped each time, or the heap top is trimmed back to the OS, so every step page-faults its
workspace in again. Raising the mmap and trim thresholds keeps freed blocks for reuse. The gain is
measured by benchmarks/train_step.py (benchmarks/RESULTS.md). The cost is that up to
``trim_threshold`` bytes of freed memory stay with the process.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys

M_TRIM_THRESHOLD = -1  # glibc <malloc.h>
M_MMAP_THRESHOLD = -3
MODES = ("tuned", "default")


def keep_freed_memory(mmap_threshold: int = 1 << 30, trim_threshold: int = 1 << 30) -> bool:
    """Set glibc's mmap and trim thresholds for this process; False where that is not possible
    (not Linux, no glibc, or glibc refused), in which case nothing changed. Both are C ints
    (mallopt's argument): at most 2**31 - 1. The mmap threshold is 1 GiB since issue 56: the tick
    engine's per-window blocks at 1000 nodes (a send wave's snapshot, a chunk's rows and gradient
    workspace: 40-120 MB) passed the earlier 64 MiB and were mmap'ed and faulted in afresh each
    window (0.59 host s a virtual second at 64 MiB, 0.42 at 1 GiB: benchmarks/RESULTS.md)."""
    if not (0 < mmap_threshold < 1 << 31 and 0 < trim_threshold < 1 << 31):
        raise ValueError(f"glibc's thresholds are C ints: got {mmap_threshold}, {trim_threshold}")
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, mmap_threshold)) and bool(mallopt(M_TRIM_THRESHOLD, trim_threshold))


def release() -> bool:
    """Collect unreachable Python objects (an engine and its stacked state sit in reference cycles
    that the cyclic collector may not visit for a long while) and hand the heap's free memory back
    to the OS (glibc's malloc_trim). Called between a sweep's jobs, which share one process: without
    it, job k+1 started with job k's state still resident (results/scaling_cpu/). False where there is no glibc to trim."""
    gc.collect()
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.malloc_trim(0))
    except (OSError, AttributeError):
        return False


def configure(mode: str) -> bool:
    """Apply ``engine.malloc``: "tuned" (keep freed memory) or "default" (leave glibc alone)."""
    if mode not in MODES:
        raise ValueError(f"engine.malloc={mode!r} is unknown; allowed: {', '.join(MODES)}")
    return mode == "tuned" and keep_freed_memory()
