"""Variance correction (Algorithm 3) vs an independent per-model numpy implementation."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from vecgossip.engines.tick.buffer import Buffers, average_full
from vecgossip.core.correction import layer_variance, rescale_
from vecgossip.network.mixing import SendOperator, adjacency
from vecgossip.models import get_model
from vecgossip.core.state import Layout, init_theta
from vecgossip.network.topology import complete

LAYOUT = Layout.of(get_model("mlp").factory())  # fc1 (64x784 + 64), fc2 (10x64 + 10)


def numpy_algorithm3(own: np.ndarray, received: list[np.ndarray], beta: float) -> np.ndarray:
    """Eq. 1 then Algorithm 3, written model by model, layer by layer."""
    avg = beta * own + (1 - beta) * np.mean(received, axis=0)
    out = avg.copy()
    for s in LAYOUT.weights:
        sl = slice(s.start, s.stop)
        target = np.mean([np.var(m[sl]) for m in received])       # np.var is the population variance
        layer = avg[sl]
        out[sl] = (layer - layer.mean()) * np.sqrt(target) / np.sqrt(np.var(layer)) + layer.mean()
    return out


@pytest.mark.parametrize("beta", [0.0, 0.5])
def test_vectorized_correction_matches_numpy(beta):
    n = 5
    theta = init_theta(LAYOUT, n, "caffe_xavier", torch.Generator().manual_seed(3), device="cpu").double()
    theta += torch.randn(theta.shape, generator=torch.Generator().manual_seed(4), dtype=torch.float64) * 0.01
    ref = theta.numpy().copy()
    send = SendOperator(adjacency(complete(n)), "cpu")
    buf = Buffers.empty(n, LAYOUT.size, len(LAYOUT.weights), "cpu")
    buf.total, buf.var_total = buf.total.double(), buf.var_total.double()
    a, c = send.select(None)
    buf.receive(a.to(torch.float64), c, theta, LAYOUT)
    th = theta.clone()
    average_full(th, buf, torch.full((n,), n - 1.0), beta, True, LAYOUT)
    for i in range(n):
        want = numpy_algorithm3(ref[i], [ref[j] for j in range(n) if j != i], beta)
        np.testing.assert_allclose(th[i].numpy(), want, rtol=1e-9, atol=1e-12)


def test_restores_target_keeps_mean_leaves_biases():
    x = torch.randn(3, LAYOUT.size, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    before = x.clone()
    target = torch.tensor([[0.5, 2.0], [1e-3, 7.0], [1.0, 1.0]], dtype=torch.float64)
    rescale_(x, target, LAYOUT)
    torch.testing.assert_close(layer_variance(x, LAYOUT), target)
    for s in LAYOUT.specs:
        seg, old = x[:, s.start:s.stop], before[:, s.start:s.stop]
        if s.is_bias:
            assert torch.equal(seg, old)
        else:
            torch.testing.assert_close(seg.mean(1), old.mean(1))


def test_identity_when_all_received_models_are_the_same():
    m = init_theta(LAYOUT, 1, "caffe_xavier", torch.Generator().manual_seed(0))[0]
    for beta, own in ((0.0, torch.zeros_like(m)), (0.5, m.clone())):
        received = m.expand(4, -1)
        th = own.unsqueeze(0).clone()
        buf = Buffers(received.sum(0, keepdim=True), torch.tensor([4.0]),
                      layer_variance(received, LAYOUT).sum(0, keepdim=True))
        average_full(th, buf, torch.tensor([4.0]), beta, True, LAYOUT)
        assert (th[0] - m).abs().max().item() <= 1e-6


def test_averaging_uncorrelated_models_shrinks_variance_by_n():
    """Proposition 1 (section IV): the mean of n independent layers has 1/n of their variance."""
    theta = init_theta(LAYOUT, 64, "caffe_xavier", torch.Generator().manual_seed(0))
    v0 = layer_variance(theta, LAYOUT).mean(0)
    v_avg = layer_variance(theta.mean(0, keepdim=True), LAYOUT)[0]
    torch.testing.assert_close(v_avg * 64, v0, rtol=0.1, atol=0)


def test_fused_rescale_matches_reference():
    from vecgossip.core.correction import rescale_reference_
    x = torch.randn(4, LAYOUT.size, generator=torch.Generator().manual_seed(1))
    target = torch.rand(4, 2, generator=torch.Generator().manual_seed(2)) + 0.1
    a, b = x.clone(), x.clone()
    rescale_(a, target, LAYOUT, impl="torch")
    rescale_reference_(b, target, LAYOUT)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


TRITON_CHECK = """
import torch
from vecgossip.core.correction import rescale_, rescale_reference_
from vecgossip.models import get_model
from vecgossip.core.state import Layout
layout = Layout.of(get_model('mlp').factory())
dev = 'cuda' if torch.cuda.is_available() else 'cpu'
x = torch.randn(3, layout.size, generator=torch.Generator().manual_seed(1)).to(dev)
target = (torch.rand(3, 2, generator=torch.Generator().manual_seed(2)) + 0.1).to(dev)
a, b = x.clone(), x.clone()
rescale_(a, target, layout, impl='triton')
rescale_reference_(b, target, layout)
torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
assert not torch.equal(a, x)
print('ok', dev)
"""


def run_triton(code: str) -> None:
    """Run ``code`` in a fresh interpreter: on CUDA when present, else under Triton's CPU interpreter."""
    import os
    import subprocess
    import sys
    pytest.importorskip("triton")
    env = dict(os.environ)
    if not torch.cuda.is_available():
        env["TRITON_INTERPRET"] = "1"
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.startswith("ok")


def test_triton_kernel_matches_reference():
    """The Triton kernel on CUDA when present, else under Triton's CPU interpreter."""
    run_triton(TRITON_CHECK)


OFFSET_CHECK = """
import torch, triton, triton.language as tl
from vecgossip.core.kernels import row_start

@triton.jit
def offsets(out_ptr, row, stride):
    tl.store(out_ptr, row_start(tl.full((), row, tl.int32), stride))

out = torch.zeros(1, dtype=torch.int64, device='cuda' if torch.cuda.is_available() else 'cpu')
offsets[(1,)](out, 4982, 431080)        # LeNet row 4,982: 2,147,640,560 > 2^31 - 1
assert int(out) == 4982 * 431080, int(out)
print('ok')
"""


def test_triton_row_offsets_are_64_bit():
    """Row offsets of the correction kernel past 2^31 (N = 10,000 LeNet nodes): the arithmetic the
    kernel uses, run through Triton (its CPU interpreter here), must not wrap."""
    run_triton(OFFSET_CHECK)


def test_cpu_row_chunking_does_not_change_the_result(monkeypatch):
    import vecgossip.core.correction as corr
    x = torch.randn(7, LAYOUT.size, generator=torch.Generator().manual_seed(5))
    target = torch.rand(7, 2, generator=torch.Generator().manual_seed(6)) + 0.1
    a, b = x.clone(), x.clone()
    rescale_(a, target, LAYOUT, impl="torch")
    monkeypatch.setattr(corr, "CPU_CACHE_BYTES", 2 * LAYOUT.size * 4)   # 2 rows per chunk
    rescale_(b, target, LAYOUT, impl="torch")
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(layer_variance(b, LAYOUT), target)
