"""What the CPU reproducibility settings cost (README "Determinism"), measured side by side.

    python benchmarks/reproducible.py [--reps 5] [--p 878538]

1. MKL's CNR mode (``MKL_CBWR=AUTO``, set when vecgossip is imported): sgemm shapes of the engines
   (1024^3; the CNN's fc1 forward at batch 128; the dense gossip W x at m = 100, P = --p),
   each in fresh interpreters with the variable unset and set, alternated ``--reps`` times; GFLOP/s,
   median over the interpreters. Also whether the bits depend on the output's address in each mode.
2. ``mixing.dense_rows_mm`` (every row in whole 8-row panels) against one plain ``addmm_`` for W x
   at m = 7 (a zero-padded tail of 7 rows) and m = 100 (4 rows), P = --p (default the CNN's 878,538).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from common import header, interleaved, table

CHILD = r"""
import json, sys, torch
from common import interleaved              # torch only: vecgossip (which sets MKL_CBWR) stays unimported
P = int(sys.argv[1])
shapes = {"sgemm 1024^3": (1024, 1024, 1024), "CNN fc1 B=128": (128, 1600, 512), "gossip m=100": (100, 100, P)}
out = {}
for name, (m, k, n) in shapes.items():
    a, b = torch.randn(m, k), torch.randn(k, n)
    out[name] = 2 * m * k * n / interleaved({"mm": lambda: a @ b})["mm"]["min"] / 1e9
assert "vecgossip" not in sys.modules
left, right, v0 = torch.randn(10, 64), torch.randn(64, 64), torch.randn(10, 64)
res = []
for off in range(4):
    c = torch.zeros(off + 704)[off:off + 640].view(10, 64)
    c.copy_(v0)
    res.append(c.addmm_(left, right, beta=0.9).clone())
out["address-independent bits"] = all(torch.equal(res[0], r) for r in res)
print(json.dumps(out))
"""


def cnr(reps: int, p: int) -> list[dict]:
    runs: dict[str, list[dict]] = {"unset": [], "AUTO": []}
    for _ in range(reps):
        for mode in runs:
            env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}
            if mode == "AUTO":
                env["MKL_CBWR"] = "AUTO"
            proc = subprocess.run([sys.executable, "-c", CHILD, str(p)], env=env, capture_output=True, text=True,
                                  check=True, cwd=os.path.dirname(os.path.abspath(__file__)))
            runs[mode].append(json.loads(proc.stdout))
    rows = []
    for mode, rs in runs.items():
        row = {"MKL_CBWR": mode}
        for k in rs[0]:
            vals = [r[k] for r in rs]
            row[k] = all(vals) if isinstance(vals[0], bool) else statistics.median(vals)
        rows.append(row)
    return rows


def panels(reps: int, p: int) -> list[dict]:
    import torch
    from vecgossip.network.mixing import dense_rows_mm
    rows = []
    for m in (7, 100):
        g = torch.Generator().manual_seed(m)
        w = torch.rand(m, m, generator=g)
        w /= w.sum(1, keepdim=True)
        x, out = torch.randn(m, p, generator=g), torch.empty(m, p)
        t = interleaved({"addmm_": lambda: out.addmm_(w, x, beta=0.0), "panels": lambda: dense_rows_mm(out, w, x)},
                        reps=reps)
        rows.append({"m": m, "addmm_ms": 1e3 * t["addmm_"]["median"], "panels_ms": 1e3 * t["panels"]["median"],
                     "ratio": t["panels"]["median"] / t["addmm_"]["median"]})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--p", type=int, default=878_538, help="model size P (default: the CIFAR CNN's)")
    a = ap.parse_args()
    print(header("CPU reproducibility settings: MKL CNR mode and whole-panel dense mixing", "cpu"), flush=True)
    rows = cnr(a.reps, a.p)
    print("\n1. GFLOP/s, median over fresh interpreters (alternated)")
    print(table(rows, list(rows[0])))
    rows = panels(a.reps, a.p)
    print(f"\n2. dense W x, P = {a.p:,}: one addmm_ vs dense_rows_mm (median ms)")
    print(table(rows, list(rows[0])))


if __name__ == "__main__":
    main()
