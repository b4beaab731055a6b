"""Shared timing helpers: interleaved side-by-side measurements with warm-up, median and min of
repetitions, the thread count and load average, and a matmul calibration in the same run, so
that the ratios printed are meaningful on a noisy machine."""
from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def sync(device: torch.device | str) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def interleaved(fns: dict[str, Callable[[], object]], reps: int = 5, warmup: int = 1,
                device: torch.device | str = "cpu") -> dict[str, dict[str, float]]:
    """Run every fn ``warmup`` times, then ``reps`` rounds of A, B, C, ... in turn; seconds per call."""
    for _ in range(warmup):
        for f in fns.values():
            f()
            sync(device)
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for k, f in fns.items():
            sync(device)
            t = time.perf_counter()
            f()
            sync(device)
            times[k].append(time.perf_counter() - t)
    return {k: {"median": statistics.median(v), "min": min(v)} for k, v in times.items()}


def matmul_gflops(device: torch.device | str = "cpu", n: int = 1024, reps: int = 5) -> float:
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    r = interleaved({"mm": lambda: a @ b}, reps=reps, device=device)["mm"]["min"]
    return 2 * n ** 3 / r / 1e9


def header(title: str, device: torch.device | str = "cpu") -> str:
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",)
    cpu = platform.processor() or platform.machine()
    lines = [f"# {title}",
             f"date {time.strftime('%Y-%m-%d %H:%M:%S')}  torch {torch.__version__}  python {platform.python_version()}",
             f"device {device}  cpu {cpu}  threads {torch.get_num_threads()}  loadavg {' '.join(f'{x:.2f}' for x in load)}",
             f"calibration: sgemm 1024^3 = {matmul_gflops(device):.1f} GFLOP/s"]
    if str(device).startswith("cuda"):
        lines.append(f"gpu {torch.cuda.get_device_name()}")
    return "\n".join(lines)


def table(rows: list[dict], cols: list[str]) -> str:
    w = {c: max(len(c), *(len(_f(r.get(c))) for r in rows)) for c in cols}
    out = ["  ".join(c.rjust(w[c]) for c in cols)]
    out += ["  ".join(_f(r.get(c)).rjust(w[c]) for c in cols) for r in rows]
    return "\n".join(out)


def _f(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)
