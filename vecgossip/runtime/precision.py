"""How a GPU computes float32 matrix products and convolutions (``precision``, issue 46).

``precision=tf32`` (the default): on a GPU, float32 matmuls and convolutions run on the TF32 tensor
cores (inputs rounded to a 10-bit mantissa, float32 accumulation: Ampere and later, ~8x the IEEE
float32 rate on an H200); ``fp32``: IEEE float32 throughout (PyTorch's own default leaves cuDNN's
convolutions on TF32: ``fp32`` turns them off too). The state, gradients, momentum, mixing and
variance correction stay float32 either way; a CPU has no TF32 and computes the same under both.
``bf16`` (autocast) and ``fp64`` take IEEE float32 for whatever they leave in float32."""
from __future__ import annotations

from contextlib import contextmanager

import torch


@contextmanager
def float32_math(precision: str, device: torch.device):
    """Within the block, a CUDA ``device`` computes float32 matmuls and convolutions as
    ``precision`` says (tf32 | IEEE); the process's settings come back afterwards."""
    if torch.device(device).type != "cuda":
        yield
        return
    matmul, conv = torch.backends.cuda.matmul, torch.backends.cudnn.conv
    before = matmul.fp32_precision, conv.fp32_precision
    mode = "tf32" if precision == "tf32" else "ieee"
    matmul.fp32_precision = conv.fp32_precision = mode
    try:
        yield
    finally:
        matmul.fp32_precision, conv.fp32_precision = before
