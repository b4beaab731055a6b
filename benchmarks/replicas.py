"""S replicas of one config in one batch (replicas=S) vs the same S runs one after another, side by
side and interleaved: the tick engine, the paper's LeNet, N nodes, asynchronous T_acq.

    python benchmarks/replicas.py                       # S = 8 replicas of N = 50, real MNIST
    python benchmarks/replicas.py --synthetic --device cuda     # on a GPU machine without the data

Both sides build their engines from the same configs (seed + s) and the same loaded data set, so
"engine" compares the simulations alone; "with loads" adds what a sequential sweep also pays per
run and the batch pays once (loading the data set: measured here, once). The outputs of the two
sides are checked equal (replica s = run s), so the comparison is between identical work.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from common import apply_malloc, emit, header, malloc_option, summary, sync

ROOT = Path(__file__).resolve().parents[1]


def configs(s: int, n: int, k: int, ticks: int, t_acq: list[int], model: str, device: str, data_root: str):
    from hydra import compose, initialize_config_dir

    from vecgossip.config.load import load
    with initialize_config_dir(config_dir=str(ROOT / "vecgossip" / "conf"), version_base=None):
        cfg = compose("config", overrides=[f"replicas={s}", f"nodes={n}", f"degree={k}", f"max_ticks={ticks}",
                                           f"t_acq=[{t_acq[0]},{t_acq[1]}]", f"model={model}", f"device={device}",
                                           "progress=false", f"data_root={data_root}"])
    return load(cfg, []).runs              # each replica's validated run


def synthetic(device: str):
    sys.path.insert(0, str(ROOT))
    from tests.conftest import synthetic_dataset
    return synthetic_dataset(6000).to(device), synthetic_dataset(1000, seed=1).to(device)


def measure(s: int = 8, n: int = 50, k: int = 8, ticks: int = 100, t_acq=(1, 19), model: str = "lenet",
            device: str = "cpu", reps: int = 2, data_root: str | None = None, rows: list | None = None) -> list[dict]:
    """Interleaved repetitions of (batched, sequential), alternating which goes first; one row per
    repetition."""
    from vecgossip.composition import tick as setup
    rows = [] if rows is None else rows
    cfgs = configs(s, n, k, ticks, list(t_acq), model, device, data_root or "unused")
    t0 = time.perf_counter()
    data = synthetic(device) if data_root is None else setup.load_data(cfgs[0].cfg, torch.device(device))
    sync(device)
    load = time.perf_counter() - t0

    def batched():
        t = time.perf_counter()
        b = setup.build_replicas(cfgs, data=data)
        built = time.perf_counter() - t
        hist = b.run(progress=False)
        sync(device)
        return built, time.perf_counter() - t - built, [np.stack(h.acc) for h in hist.parts]

    def sequential():
        built = ran = 0.0
        accs = []
        for c in cfgs:
            t = time.perf_counter()
            e = setup.build_engine(c, data=data)
            built += time.perf_counter() - t
            t = time.perf_counter()
            accs.append(np.stack(e.run(progress=False).acc))
            sync(device)
            ran += time.perf_counter() - t
        return built, ran, accs

    for rep in range(reps):             # alternate which side goes first
        if rep % 2 == 0:
            (bb, br, acc_b), (sb, sr, acc_s) = batched(), sequential()
        else:
            (sb, sr, acc_s), (bb, br, acc_b) = sequential(), batched()
        same = all(np.array_equal(x, y) for x, y in zip(acc_b, acc_s))
        emit(rows, {"rep": rep, "S": s, "N": n, "ticks": ticks, "batched_s": round(bb + br, 3),
                    "sequential_s": round(sb + sr, 3), "engine_ratio": round((sb + sr) / (bb + br), 3),
                    "load_s": round(load, 3),
                    "ratio_with_loads": round((sb + sr + s * load) / (bb + br + load), 3),
                    "equal_outputs": same})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--nodes", type=int, default=50)
    ap.add_argument("--degree", type=int, default=8)
    ap.add_argument("--ticks", type=int, default=100)
    ap.add_argument("--t-acq", type=int, nargs=2, default=[1, 19])
    ap.add_argument("--model", default="lenet")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--synthetic", action="store_true", help="synthetic MNIST-shaped images (no data set needed)")
    malloc_option(ap)
    a = ap.parse_args()
    malloc = apply_malloc(a.malloc)      # what `python -m vecgossip` sets on a CPU, for both sides
    root = None if a.synthetic else os.environ.get("VECGOSSIP_DATA", str(ROOT.parent / "shared" / "data"))
    print(header(f"{a.replicas} replicas in one batch vs {a.replicas} sequential runs, tick engine, {a.model}, "
                 f"N = {a.nodes}, k = {a.degree}, T_acq {a.t_acq}, {a.ticks} ticks"
                 + (" (synthetic images)" if a.synthetic else " (MNIST)"), a.device, malloc))
    rows = measure(a.replicas, a.nodes, a.degree, a.ticks, a.t_acq, a.model, a.device, a.reps, root)
    summary(rows, "seconds per side; ratio = sequential / batched")
    med = float(np.median([r["engine_ratio"] for r in rows]))
    print(f"\nmedian engine ratio (sequential / batched): {med:.2f}x; "
          f"with the per-run data load: {np.median([r['ratio_with_loads'] for r in rows]):.2f}x")


if __name__ == "__main__":
    main()
