"""Same config and seed, same outputs (CPU); deterministic=true swaps the atomic sparse products for
index_add_-based ones and turns on torch's deterministic algorithms, and changes nothing else."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from test_config import make
from vecgossip import mixing
from vecgossip.sim import run
from vecgossip.topology import random_regular


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
