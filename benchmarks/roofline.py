"""Roofline map of one LeNet-5 training step and a tick round: for each phase, its FLOPs (or bytes),
time, achieved rate and fraction of this run's sgemm (or copy) calibration, for the batched step and
the fair per-node loop (benchmarks/loop.py) side by side (issue 13's map).

    python benchmarks/roofline.py [--n 50] [--batch 64] [--reps 3] [--device cpu|cuda]

Times come from torch.profiler (self CPU time of each aten op over ``--reps`` steps; on a GPU the
device time of the kernels each aten op launched; gpu_check.py section 9 prints it there), grouped into
phases by op; FLOPs are counted by hand from LeNet's shapes (conv1 1->20 5x5 on 28x28, conv2 20->50
5x5 on 12x12, ip1 800->500, ip2 500->10): forward 2 x MACs, and the backward's input and weight
gradients 2 x MACs each (conv1 has no input gradient). Bytes: the optimiser streams w, v (read and
write) and the gradient (read): 5 x 4 bytes per parameter. The tick phases (send, Eq. 1 average,
correction, evaluation on 100 images) are timed whole (benchmarks/common.round_parts) with their
bytes (send: 3 x 4 bytes per element with the dense operator, (k + 2) x 4 with CSR; average 4;
correction 3) and
evaluation's forward FLOPs.
"""
from __future__ import annotations

import argparse
import time
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from common import header, make_engine, matmul_gflops, round_parts, sync, table
import train_step

P = 431_080                                              # LeNet-5 parameters
MACS = {"conv1": 20 * 24 * 24 * 25, "conv2": 50 * 8 * 8 * 500, "ip1": 800 * 500, "ip2": 500 * 10}   # per image
PHASES = (   # phase, ops (aten names, self time) and FLOPs per image (x batch x nodes)
    ("conv forward", ("aten::mkldnn_convolution", "aten::cudnn_convolution", "aten::_convolution",
                      "aten::convolution"),
     2 * (MACS["conv1"] + MACS["conv2"])),
    ("conv backward (input + weight grads)", ("aten::convolution_backward",),
     2 * (MACS["conv1"] + 2 * MACS["conv2"])),
    ("linear forward", ("aten::baddbmm", "aten::addmm"), 2 * (MACS["ip1"] + MACS["ip2"])),
    ("linear backward (input + weight grads)", ("aten::bmm", "aten::mm"), 4 * (MACS["ip1"] + MACS["ip2"])),
    ("pool + relu (fwd + bwd)", ("aten::max_pool2d_with_indices", "aten::max_pool2d_with_indices_backward",
                                 "aten::relu", "aten::relu_", "aten::threshold_backward", "aten::clamp_min"), None),
    ("loss (fwd + bwd)", ("aten::_log_softmax", "aten::_log_softmax_backward_data", "aten::nll_loss_forward",
                          "aten::nll_loss_backward"), None),
    ("optimiser", ("aten::_fused_sgd_", "aten::_foreach_add_", "aten::_foreach_mul_", "aten::add_", "aten::mul_",
                   "aten::addcmul_", "aten::lerp_"), None),
    ("copies / fills / layout", ("aten::copy_", "aten::fill_", "aten::zero_", "aten::clone", "aten::contiguous",
                                 "aten::cat", "aten::index", "aten::gather"), None),
)


def copy_gbs(reps: int = 5, device: str = "cpu", mb: int = 64) -> float:
    """Bytes read + written per second by a large tensor copy (the bandwidth calibration)."""
    a = torch.randn(mb << 20 >> 2, device=device)
    b = torch.empty_like(a)
    b.copy_(a)
    best = float("inf")
    for _ in range(reps):
        sync(device)
        t = time.perf_counter()
        b.copy_(a)
        sync(device)
        best = min(best, time.perf_counter() - t)
    return 2 * a.numel() * 4 / best / 1e9


def profile_step(fn, reps: int, device: str = "cpu") -> dict[str, float]:
    """ms per op name, per call of ``fn``, after two warm-up calls: self CPU time on the CPU, the
    device time of the kernels an op launched (self device time) on a GPU."""
    fn()
    fn()
    gpu = device.startswith("cuda")
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    sync(device)
    with profile(activities=acts) as prof:
        for _ in range(reps):
            fn()
        sync(device)
    out: dict[str, float] = defaultdict(float)
    for e in prof.key_averages():
        us = getattr(e, "self_device_time_total", 0.0) if gpu else e.self_cpu_time_total
        out[e.key] += us / 1e3 / reps
    return out


def phase_rows(ops: dict[str, float], side: str, n: int, batch: int, gflops: float, gbs: float) -> list[dict]:
    rows, seen = [], set()
    for name, names, flop_per_image in PHASES:
        ms = sum(ops.get(k, 0.0) for k in names)
        seen.update(names)
        row = {"side": side, "phase": name, "ms": ms}
        if flop_per_image is not None:
            gf = flop_per_image * batch * n / 1e9
            row.update(GFLOP=gf, rate=f"{gf / (ms / 1e3):.0f} GFLOP/s" if ms else "-",
                       of_calibration=f"{100 * gf / (ms / 1e3) / gflops:.0f}% sgemm" if ms else "-")
        elif name == "optimiser":
            gb = 5 * 4 * P * n / 1e9
            row.update(GB=gb, rate=f"{gb / (ms / 1e3):.1f} GB/s" if ms else "-",
                       of_calibration=f"{100 * gb / (ms / 1e3) / gbs:.0f}% copy" if ms else "-")
        rows.append(row)
    rest = sum(v for k, v in ops.items() if k not in seen and k.startswith("aten::"))
    rows.append({"side": side, "phase": "other aten ops", "ms": rest})
    rows.append({"side": side, "phase": "TOTAL (self time of aten ops)", "ms": sum(r["ms"] for r in rows)})
    return rows


def tick_rows(n: int, k: int, reps: int, gflops: float, gbs: float, device: str = "cpu") -> list[dict]:
    eng = make_engine(n, k, "lenet", device)
    med = round_parts(eng, reps, device)
    # send: a dense operator (the graph is dense: one GEMM) reads every sender's row once and adds into
    # each buffer row once; CSR reads k rows per receiver
    send_bytes = 3 * 4 * n * P if eng.wiring.send.dense else 4 * (k + 2) * n * P
    parts = {"send": send_bytes, "average": 4 * 4 * n * P, "correction": 3 * 4 * n * P}
    rows = [{"side": "tick", "phase": "train (whole step)", "ms": med["train"]}]
    for name, b in parts.items():
        gb = b / 1e9
        rows.append({"side": "tick", "phase": name, "ms": med[name], "GB": gb,
                     "rate": f"{gb / (med[name] / 1e3):.1f} GB/s",
                     "of_calibration": f"{100 * gb / (med[name] / 1e3) / gbs:.0f}% copy"})
    gf = 2 * sum(MACS.values()) * 100 * n / 1e9
    rows.append({"side": "tick", "phase": "evaluation (100 images)", "ms": med["eval"], "GFLOP": gf,
                 "rate": f"{gf / (med['eval'] / 1e3):.0f} GFLOP/s",
                 "of_calibration": f"{100 * gf / (med['eval'] / 1e3) / gflops:.0f}% sgemm"})
    return rows


def roofline(n: int, batch: int, k: int, reps: int, device: str = "cpu") -> list[dict]:
    """Print the calibration and the phase table of one LeNet step (batched and loop) and a tick
    round on ``device``; returns the rows (gpu_check.py section 9 keeps them in its JSON)."""
    gflops, gbs = matmul_gflops(device), copy_gbs(device=device)
    what = "sgemm" if not device.startswith("cuda") else \
        f"fp32 GEMM (matmul TF32 {'on' if torch.backends.cuda.matmul.allow_tf32 else 'off'}; convolutions may use TF32)"
    print(f"calibration used below: {what} {gflops:.0f} GFLOP/s, copy {gbs:.1f} GB/s (read + write, 64 MB)\n",
          flush=True)
    from vecgossip.models.chunks import resolve_chunk
    chunk = resolve_chunk("auto", torch.device(device), batch, "lenet")
    batched, loop, sgd = train_step.setup("lenet", n, batch, device, "explicit", chunk)
    rows = phase_rows(profile_step(batched, reps, device), "batched", n, batch, gflops, gbs)
    rows += phase_rows(profile_step(loop, reps, device), f"loop ({sgd} SGD)", n, batch, gflops, gbs)
    rows += tick_rows(n, k, reps, gflops, gbs, device)
    cols = ["side", "phase", "ms", "GFLOP", "GB", "rate", "of_calibration"]
    rows = [{c: r.get(c, "-") for c in cols} for r in rows]
    print(table(rows, cols), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    print(header(f"roofline: LeNet-5 step of {a.n} nodes at batch {a.batch}, batched vs fair loop; tick phases",
                 a.device), flush=True)
    roofline(a.n, a.batch, a.k, a.reps, a.device)


if __name__ == "__main__":
    main()
