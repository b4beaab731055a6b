"""One simulated round of the tick engine (T_acq = 10: every node trains, sends, averages), broken
into train / send+buffer / average (Eq. 1) / correction (Algorithm 3) / evaluation, per N.

    python benchmarks/round.py [--n 50 200 1000 2000] [--model lenet] [--k 8] [--malloc tuned|default]

Each N runs in its own subprocess so peak memory (ru_maxrss) is per configuration. Prints ms per
round and per part, the marginal ms per node between consecutive N, the ratio round / train
(everything but training as overhead), and peak MB per node.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

import torch

from common import apply_malloc, emit, header, make_engine, malloc_option, round_parts, summary


def child(n: int, k: int, model: str, reps: int, device: str) -> dict:
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    eng = make_engine(n, k, model, device)
    med = round_parts(eng, reps, device)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if device.startswith("cuda"):
        peak_dev = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak_dev = (peak - base_rss) / 1024
    return {"N": n, **{f"{k}_ms": v for k, v in med.items()},
            "round_ms": med["train"] + med["send"] + med["average"] + med["correction"],
            "peak_MB": peak_dev, "reps": reps}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[50, 200, 1000, 2000])
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--model", default="lenet")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--child", type=int, default=None)
    malloc_option(ap)
    a = ap.parse_args()
    malloc = apply_malloc(a.malloc)
    if a.child is not None:
        print(json.dumps(child(a.child, a.k, a.model, a.reps, a.device)))
        return
    print(header(f"tick round ({a.model}, k={a.k}): parts per round", a.device, malloc))
    rows = []
    for n in a.n:
        reps = a.reps if n <= 200 else max(2, a.reps // 3) if n <= 1000 else 1
        out = subprocess.run([sys.executable, __file__, "--child", str(n), "--k", str(a.k), "--model", a.model,
                              "--reps", str(reps), "--device", a.device, "--malloc", a.malloc], capture_output=True, text=True)
        if out.returncode != 0:
            print(f"N={n} failed:\n{out.stderr[-3000:]}")
            continue
        row = json.loads(out.stdout.strip().splitlines()[-1])
        row["round/train"] = row["round_ms"] / row["train_ms"]
        row["MB/node"] = row["peak_MB"] / n
        if rows:
            prev = rows[-1]
            row["marginal_ms/node"] = (row["round_ms"] - prev["round_ms"]) / (n - prev["N"])
        emit(rows, row)
    cols = ["N", "train_ms", "send_ms", "average_ms", "correction_ms", "round_ms", "round/train", "eval_ms",
            "marginal_ms/node", "peak_MB", "MB/node", "reps"]
    summary(rows, "median ms; round = train + send + average + correction; eval separate", cols)


if __name__ == "__main__":
    main()
