"""Triton kernels (CUDA; they also run under TRITON_INTERPRET=1 on the CPU for tests).

``affine_by_layer_``: v <- v * scale[node, layer(v)] + shift[node, layer(v)] over a whole (M, P)
buffer in one launch: the fused rescale pass of variance correction (Algorithm 3). Elements whose
layer id is L (biases) use the identity slot (scale 1, shift 0).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

Tensor = torch.Tensor


@triton.jit
def row_start(row, stride):
    """Element offset of row ``row``: in 64 bits, since row * stride passes 2^31 at scale (LeNet's
    431,080 parameters from row 4,982 on: N = 10,000 nodes would wrap in int32)."""
    return row.to(tl.int64) * stride


@triton.jit
def _affine_by_layer(x_ptr, lid_ptr, scale_ptr, shift_ptr, P, L1, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < P
    lid = tl.load(lid_ptr + cols, mask=mask, other=0).to(tl.int32)
    s = tl.load(scale_ptr + row_start(row, L1) + lid, mask=mask, other=1.0)
    b = tl.load(shift_ptr + row_start(row, L1) + lid, mask=mask, other=0.0)
    start = row_start(row, stride)
    x = tl.load(x_ptr + start + cols, mask=mask)
    tl.store(x_ptr + start + cols, x * s + b, mask=mask)


def affine_by_layer_(x: Tensor, layer_id: Tensor, scale: Tensor, shift: Tensor, block: int = 1024) -> Tensor:
    """In place on x (M, P) with unit column stride; layer_id (P,) int8 in [0, L]; scale/shift (M, L)."""
    m, p = x.shape
    if x.stride(1) != 1:
        raise ValueError("affine_by_layer_: x must have unit column stride")
    ones = torch.ones(m, 1, dtype=scale.dtype, device=scale.device)
    sc = torch.cat([scale, ones], 1).contiguous()                               # (M, L+1)
    sh = torch.cat([shift, torch.zeros_like(ones)], 1).contiguous()
    _affine_by_layer[(m, triton.cdiv(p, block))](x, layer_id, sc, sh, p, sc.shape[1], x.stride(0), BLOCK=block)
    return x
