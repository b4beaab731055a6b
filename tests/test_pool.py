"""The fused 2x2 max-pool (+ ReLU) of models/pool.py against torch's F.max_pool2d and relu, bit for
bit: values, window positions chosen on ties (first maximum, row-major), NaN, odd borders, and
the input gradient."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from vecgossip.models.pool import fused_ok, max_pool2


def _reference(x: torch.Tensor, g: torch.Tensor, relu: bool):
    xr = x.detach().clone().requires_grad_()
    y = F.max_pool2d(xr, 2)
    y = F.relu(y) if relu else y
    y.backward(g)
    return y.detach(), xr.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("shape", [(3, 5, 8, 8), (2, 7, 9, 11), (4, 16, 28, 28)])
def test_fused_pool_equals_torch(dtype, relu, shape):
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-3, 4, shape, generator=g).to(dtype)     # small integers: many ties, zeros
    x[0, 0, 0, 0] = float("nan")
    x[-1, -1, -1, -1] = float("-inf")
    x = x.contiguous(memory_format=torch.channels_last)
    assert fused_ok(x)
    ho, wo = shape[2] // 2, shape[3] // 2
    gy = torch.randn(shape[0], shape[1], ho, wo, generator=g).to(dtype)
    want_y, want_dx = _reference(x, gy, relu)
    xr = x.clone().requires_grad_()
    y = max_pool2(xr, relu)
    y.backward(gy)
    assert torch.equal(y.isnan(), want_y.isnan())
    assert torch.equal(y.nan_to_num(), want_y.nan_to_num())
    assert torch.equal(xr.grad, want_dx)
    # the same from an NCHW input
    xn = x.contiguous().requires_grad_()
    yn = max_pool2(xn, relu)
    yn.backward(gy)
    assert torch.equal(yn.nan_to_num(), want_y.nan_to_num()) and torch.equal(xn.grad, want_dx)


def test_fused_pool_float_values_and_fallback():
    """Continuous values (no ties) in both paths; a dtype the kernel does not take falls back to torch."""
    x = torch.randn(2, 6, 10, 10, dtype=torch.float64)
    gy = torch.randn(2, 6, 5, 5, dtype=torch.float64)
    want_y, want_dx = _reference(x, gy, True)
    xr = x.clone().requires_grad_()
    y = max_pool2(xr, True)
    y.backward(gy)
    assert torch.equal(y, want_y) and torch.equal(xr.grad, want_dx)
    xh = x.to(torch.bfloat16)
    assert not fused_ok(xh)
    assert torch.equal(max_pool2(xh, True), F.relu(F.max_pool2d(xh, 2)))
