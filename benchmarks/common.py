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

try:
    import resource
except ImportError:                          # not POSIX: no page-fault counts
    resource = None

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def sync(device: torch.device | str) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def minor_faults() -> int:
    """This process's minor page faults so far (every thread; 0 where getrusage is missing)."""
    return 0 if resource is None else resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def interleaved(fns: dict[str, Callable[[], object]], reps: int = 5, warmup: int = 1,
                device: torch.device | str = "cpu", rotate: bool = False) -> dict[str, dict[str, float]]:
    """Run every fn ``warmup`` times, then ``reps`` rounds of A, B, C, ... in turn; seconds per
    call (median, min) and the minor page faults of each call (``faults_each``) and their median
    (``faults``: memory that a call had to map in, i.e. a side still growing its heap). ``rotate``:
    round r starts at fn r mod k (a cyclic Latin square), so that no side always runs right after
    the same other side."""
    for _ in range(warmup):
        for f in fns.values():
            f()
            sync(device)
    names = list(fns)
    times: dict[str, list[float]] = {k: [] for k in fns}
    faults: dict[str, list[int]] = {k: [] for k in fns}
    for r in range(reps):
        order = names[r % len(names):] + names[:r % len(names)] if rotate else names
        for k in order:
            sync(device)
            f0, t = minor_faults(), time.perf_counter()
            fns[k]()
            sync(device)
            times[k].append(time.perf_counter() - t)
            faults[k].append(minor_faults() - f0)
    return {k: {"median": statistics.median(v), "min": min(v), "faults": statistics.median(faults[k]),
                "faults_each": faults[k]} for k, v in times.items()}


def matmul_gflops(device: torch.device | str = "cpu", n: int = 1024, reps: int = 5) -> float:
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    r = interleaved({"mm": lambda: a @ b}, reps=reps, device=device)["mm"]["min"]
    return 2 * n ** 3 / r / 1e9


TRANSFERS = ("run_until", "start", "delivered", "remove")   # a timed tick engine's transfers: the clock's host work


def time_calls(obj, names) -> list[float]:
    """Wraps the methods ``names`` of ``obj`` so that their host seconds add up in the returned
    one-item list (reset it to start again)."""
    spent = [0.0]
    for name in names:
        fn = getattr(obj, name)

        def timed(*a, _fn=fn, **k):
            t0 = time.perf_counter()
            try:
                return _fn(*a, **k)
            finally:
                spent[0] += time.perf_counter() - t0
        setattr(obj, name, timed)
    return spent


def malloc_option(ap) -> None:
    """``--malloc``: glibc settings for the whole process, so both sides of a comparison run under
    the same allocator (a process's history changes what the next allocation costs)."""
    from vecgossip.runtime.allocator import MODES
    ap.add_argument("--malloc", default="tuned", choices=MODES,
                    help="tuned: what `python -m vecgossip` sets on a CPU (vecgossip/runtime/allocator.py); "
                         "default: glibc's own")


def apply_malloc(mode: str) -> str:
    from vecgossip.runtime.allocator import configure
    applied = configure(mode)
    return f"malloc {mode}" + ("" if applied or mode == "default" else " (not applied: no glibc)")


def header(title: str, device: torch.device | str = "cpu", malloc: str = "") -> str:
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",)
    cpu = platform.processor() or platform.machine()
    lines = [f"# {title}",
             f"date {time.strftime('%Y-%m-%d %H:%M:%S')}  torch {torch.__version__}  python {platform.python_version()}",
             f"device {device}  cpu {cpu}  threads {torch.get_num_threads()}  loadavg {' '.join(f'{x:.2f}' for x in load)}"
             + (f"  {malloc}" if malloc else ""),
             f"calibration: sgemm 1024^3 = {matmul_gflops(device):.1f} GFLOP/s"]
    if str(device).startswith("cuda"):
        lines.append(f"gpu {torch.cuda.get_device_name()}")
    return "\n".join(lines)


def input_shape(model: str) -> tuple[int, int, int]:
    """The (C, H, W) the benchmarks feed a model: MNIST's for LeNet and the MLP, CIFAR's otherwise."""
    return (1, 28, 28) if model in ("lenet", "mlp") else (3, 32, 32)


def table(rows: list[dict], cols: list[str]) -> str:
    w = {c: max(len(c), *(len(_f(r.get(c))) for r in rows)) for c in cols}
    out = ["  ".join(c.rjust(w[c]) for c in cols)]
    out += ["  ".join(_f(r.get(c)).rjust(w[c]) for c in cols) for r in rows]
    return "\n".join(out)


def emit(rows: list[dict], row: dict) -> None:
    """Keep a measured row and print it at once (long runs show progress)."""
    rows.append(row)
    print(table([row], list(row)), flush=True)


def summary(rows: list[dict], caption: str, cols: list[str] | None = None) -> None:
    print(f"\nsummary ({caption})")
    print(table(rows, cols or list(rows[0])))


def _f(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def make_engine(n: int, k: int, model: str, device: str, batch: int = 64):
    """A tick engine on synthetic images (speed does not depend on pixel values) with a random
    connected k-regular graph, beta 0.5: what one synchronous round of the paper runs."""
    import numpy as np

    from tests.conftest import synthetic_dataset
    from tests.settings import TickSetting, tick_engine
    from vecgossip.models import get_model, make_forward
    from vecgossip.core.optim import SGDConfig
    from vecgossip.network.peers import Links
    from vecgossip.core.state import Layout, init_theta, new_state
    from vecgossip.network.topology import random_regular

    layout = Layout.of(get_model(model).factory())
    data = synthetic_dataset(6000).to(device)
    theta = init_theta(layout, n, "caffe_xavier", torch.Generator().manual_seed(0), device=device)
    x_eval, _ = data.batch(torch.arange(100, device=device))
    from vecgossip.models.chunks import resolve_chunk

    dev = torch.device(device)
    tcfg = TickSetting(beta=0.5, batch_size=batch, train_chunk=resolve_chunk("auto", dev, batch, model),
                       eval_chunk=resolve_chunk("auto", dev, 100, model))
    return tick_engine(tcfg, new_state(layout, theta),
                       Links(random_regular(n, k, 0)), make_forward(model), SGDConfig(), data, None,
                       x_eval, data.labels[:100], torch.Generator(device=device).manual_seed(0),
                       np.random.default_rng(0))


def sync_round(eng) -> None:
    """One synchronous round of a :func:`make_engine` engine: every node trains, sends, averages
    (Eq. 1, beta 0.5, no correction): what one T_acq slot of the paper's tick model does."""
    import numpy as np

    from vecgossip.engines.tick.buffer import average_full
    nodes = np.arange(eng.state.n)
    eng.sgd_step(nodes)
    eng.send_models(nodes, None, 0)
    average_full(eng.state.theta, eng.buffers, eng.buffer_size, 0.5, False, eng.layout)


def round_parts(eng, reps: int, device: str) -> dict[str, float]:
    """Median ms of each part of one synchronous round, after one warm-up round."""
    from vecgossip.engines.tick.buffer import average_full
    from vecgossip.core.correction import rescale_

    import numpy as np

    n, layout = eng.state.n, eng.layout
    nodes = np.arange(n)
    target = torch.full((n, len(layout.weights)), 1e-3, device=device)
    parts: dict[str, list[float]] = {"train": [], "send": [], "average": [], "correction": [], "eval": []}

    def timed(name, fn):
        sync(device)
        t = time.perf_counter()
        fn()
        sync(device)
        parts[name].append(time.perf_counter() - t)

    for r in range(reps + 1):  # the first repetition is the warm-up
        timed("train", lambda: eng.sgd_step(nodes))
        timed("send", lambda: eng.send_models(nodes, None, 0))
        timed("average", lambda: average_full(eng.state.theta, eng.buffers, eng.buffer_size, 0.5, False, layout))
        timed("correction", lambda: rescale_(eng.state.theta, target, layout))
        timed("eval", lambda: eng.measure(0))
        if r == 0:
            for v in parts.values():
                v.clear()
    return {k: statistics.median(v) * 1e3 for k, v in parts.items()}
