"""Variance correction: the literal reference (Algorithm 3 per layer: sub, mul, add) vs the fused
path (one moments pass + one affine pass; Triton on CUDA), as achieved bandwidth against a plain
copy of the same buffer measured in the same run.

    python benchmarks/correction.py [--n 50 200] [--device cpu]

Bandwidth counts the minimum traffic of a rescale: read + write the weights once (2 x bytes);
a copy moves the same 2 x bytes. fused/copy >= 0.5 is the goal.
"""
from __future__ import annotations

import argparse

import torch

from common import emit, header, interleaved, summary
from vecgossip.core.correction import rescale_, rescale_reference_
from vecgossip.models import get_model
from vecgossip.core.state import Layout


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[50, 200])
    ap.add_argument("--model", default="lenet")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    layout = Layout.of(get_model(a.model).factory())
    print(header(f"variance correction on {a.model} (P={layout.size})", a.device))
    impls = ["torch"] + (["triton"] if a.device.startswith("cuda") else [])
    rows = []
    for n in a.n:
        x = torch.randn(n, layout.size, device=a.device) * 0.03
        dst = torch.empty_like(x)
        target = torch.full((n, len(layout.weights)), 1e-3, device=a.device)
        a_ref, a_fused = x.clone(), x.clone()
        rescale_reference_(a_ref, target, layout)
        rescale_(a_fused, target, layout)
        assert torch.allclose(a_ref, a_fused, rtol=1e-4, atol=1e-6)
        fns = {"copy": lambda: dst.copy_(x), "reference": lambda: rescale_reference_(x, target, layout)}
        for impl in impls:
            fns[f"fused_{impl}"] = (lambda i=impl: rescale_(x, target, layout, impl=i))
        t = interleaved(fns, reps=a.reps, device=a.device)
        nbytes = 2 * x.numel() * 4
        row = {"N": n, "MB": x.numel() * 4 / 2**20}
        for name in fns:
            row[f"{name}_GB/s"] = nbytes / t[name]["median"] / 1e9
        for name in fns:
            if name != "copy":
                row[f"{name}/copy"] = t["copy"]["median"] / t[name]["median"]
                row[f"{name}/copy_min"] = t["copy"]["min"] / t[name]["min"]
        emit(rows, row)
    summary(rows, "GB/s of 2 x buffer bytes, medians; X/copy = fraction of plain-copy bandwidth, "
                  "X/copy_min the same from the minima")


if __name__ == "__main__":
    main()
