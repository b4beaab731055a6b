"""Same config and seed, same outputs (CPU); deterministic=true swaps the atomic sparse products for
index_add_-based ones and turns on torch's deterministic algorithms, and changes nothing else."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from test_config import make
from vecgossip.network import mixing
from vecgossip.composition.root import run
from vecgossip.network.topology import random_regular


def test_deterministic_csr_product_equals_spmm():
    g = random_regular(30, 4, 0)
    a = mixing.to_torch_csr(mixing.uniform_mixing(g), "cpu")
    x = torch.randn(30, 7, generator=torch.Generator().manual_seed(0))
    for beta in (0.0, 1.0, 0.5):
        out = torch.randn(30, 7, generator=torch.Generator().manual_seed(1))
        want = out.clone().addmm_(a, x, beta=beta)
        old = mixing.ROW_BUDGET
        mixing.ROW_BUDGET = 7 * 11                                  # several gather chunks
        try:
            got = mixing.csr_addmm_(out.clone(), a, x, beta)
        finally:
            mixing.ROW_BUDGET = old
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("m", [3, 7, 13, 16])
def test_dense_mixing_rows_do_not_depend_on_the_rows_computed_with_them(m):
    """mixing.dense_rows_mm: every subset of W's rows (a shard's) gives bit for bit the rows of the
    whole product (one process), and the product equals W @ X computed in float64."""
    g = torch.Generator().manual_seed(m)
    w = torch.rand(m, m, generator=g)
    w /= w.sum(1, keepdim=True)
    x = torch.randn(m, 4099, generator=g)
    whole = mixing.dense_rows_mm(torch.empty(m, 4099), w, x)
    torch.testing.assert_close(whole.double(), w.double() @ x.double(), rtol=1e-6, atol=1e-6)
    for lo, hi in ((0, 1), (0, m // 2), (m // 2, m), (1, m - 1), (m - 1, m), (0, m)):
        if lo < hi:
            got = mixing.dense_rows_mm(torch.empty(hi - lo, 4099), w[lo:hi], x)
            assert torch.equal(got, whole[lo:hi]), (lo, hi)


def test_gemm_results_do_not_depend_on_the_output_address():
    """vecgossip sets MKL's CNR mode (MKL_CBWR=AUTO) on import: an addmm_ into an output at any
    float offset gives the same bits (without it, MKL's AVX2 path on an AMD EPYC differed at
    offsets 1-3 mod 4). Run in a fresh interpreter, where the first MKL call comes after the import."""
    code = """
import vecgossip, torch
g = torch.Generator().manual_seed(0)
left, right, v0 = torch.randn(10, 64, generator=g), torch.randn(64, 64, generator=g), torch.randn(10, 64, generator=g)
res = []
for off in range(8):
    c = torch.zeros(off + 640 + 64)[off:off + 640].view(10, 64)
    c.copy_(v0)
    res.append(c.addmm_(left, right, beta=0.9).clone())
    res.append(torch.mm(left, right, out=c).clone())
assert all(torch.equal(res[i % 2], r) for i, r in enumerate(res)), "GEMM bits depend on the output address"
import os; print(os.environ["MKL_CBWR"])
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != "MKL_CBWR"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "AUTO"


@pytest.mark.parametrize("engine", ["tick", "rounds"])
def test_same_seed_same_outputs_and_the_deterministic_flag(data_root, tmp_path, engine):
    # 100 nodes of degree 4: sparse enough for the CSR products that deterministic=true replaces
    over = (["+experiment=vc", "model=mlp", "nodes=100", "degree=4", "max_ticks=40"]
            if engine == "tick" else
            ["method=dfedsam_mgs", "model=mlp", "clients=100", "topology=random", "degree=4", "rounds=2",
             "local_steps=1", "local_epochs=null", "eval_every=1", "data.global_test_size=100",
             "data.local_test_size=20"])
    over += [f"data_root={data_root}", "progress=false"]
    a = run(make(over), tmp_path / "a")["_history"]
    b = run(make(over), tmp_path / "b")["_history"]
    assert (tmp_path / "a" / "metrics.csv").read_bytes() == (tmp_path / "b" / "metrics.csv").read_bytes()
    d = run(make(over + ["deterministic=true"]), tmp_path / "d")["_history"]
    assert not torch.are_deterministic_algorithms_enabled() and not mixing.DETERMINISTIC["on"]   # restored
    np.testing.assert_allclose(np.stack(d.acc), np.stack(a.acc), atol=0.02)   # same run, other summation order
    assert np.array_equal(np.stack(a.acc), np.stack(b.acc))
