"""2x2 max-pooling (stride 2), optionally followed by ReLU, as one fused CPU pass each way.

The batched conv layers (LeNet, the CIFAR CNN) pool a channels-last (B, N*C, H, W) tensor of all
nodes at once. ``F.max_pool2d`` + ReLU costs, per direction, several passes over it: the pool with
int64 indices (8 bytes per output), then the ReLU; backward a zero fill of the whole input-sized
gradient, a scatter into it, and the ReLU's mask. Here the forward writes the pooled (and
rectified) values and a 1-byte window position, and the backward writes every input-gradient
element exactly once: measured on the 2-core CPU (numba, 2 threads), the CNN's conv1 block at 2
clients per chunk (B 128, 64 channels, 28 x 28) takes 3.6 ms forward + backward vs 5.7 ms for the
torch ops in isolation, and a whole CNN round at m = 20, batch 128 is ~6% faster (615 vs 652 ms,
interleaved; benchmarks/RESULTS.md). LeNet (no ReLU; 20/50 channels) gained nothing at batch 64
and lost 5% at batch 8 (numba's launches on small tensors): it keeps torch's pool.

Exactly torch's semantics (tested bit for bit against ``F.max_pool2d`` and ``relu``): the window is
scanned row-major and the first maximum wins (a NaN wins and propagates); odd rows/columns at the
border are dropped, their gradient is zero; with ``relu`` the output is max(m, 0) (NaN stays NaN)
and its gradient is cut where the output is <= 0 (torch's threshold_backward: a NaN passes it). Elsewhere (GPU, other dtypes, no numba) it is
``F.max_pool2d`` followed by ``relu_``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

Tensor = torch.Tensor
CL = torch.channels_last

_KERNELS = None


def _compile():
    from ..jit import numba
    nb = numba()

    @nb.njit(parallel=True, cache=True)
    def forward(x, out, idx, relu, zero):               # x (B, H, W, C) -> out, idx (B, H//2, W//2, C)
        b_, ho, wo, c_ = out.shape
        for r in nb.prange(b_ * ho):
            b, i = r // ho, r % ho
            for j in range(wo):
                for c in range(c_):
                    m, k = x[b, 2 * i, 2 * j, c], 0
                    v = x[b, 2 * i, 2 * j + 1, c]
                    if v > m or v != v:
                        m, k = v, 1
                    v = x[b, 2 * i + 1, 2 * j, c]
                    if v > m or v != v:
                        m, k = v, 2
                    v = x[b, 2 * i + 1, 2 * j + 1, c]
                    if v > m or v != v:
                        m, k = v, 3
                    if relu and m <= 0:
                        m = zero
                    out[b, i, j, c] = m
                    idx[b, i, j, c] = k

    @nb.njit(parallel=True, cache=True)
    def backward(g, out, idx, gin, relu, zero):          # g, out, idx (B, Ho, Wo, C) -> gin (B, H, W, C)
        b_, h_, w_, c_ = gin.shape
        ho, wo = g.shape[1], g.shape[2]
        for r in nb.prange(b_ * h_):
            b, y = r // h_, r % h_
            i, dy = y // 2, y % 2
            j_end = wo if i < ho else 0                # a dropped last row: all zero
            for j in range(j_end):
                for dx in range(2):
                    t = 2 * dy + dx
                    for c in range(c_):
                        gv = g[b, i, j, c]
                        if relu and out[b, i, j, c] <= 0:
                            gv = zero
                        gin[b, y, 2 * j + dx, c] = gv if idx[b, i, j, c] == t else zero
            for x in range(2 * j_end, w_):
                for c in range(c_):
                    gin[b, y, x, c] = zero

    return forward, backward


def _kernels():
    global _KERNELS
    if _KERNELS is None:
        _KERNELS = _compile()
    return _KERNELS


def _nhwc(t: Tensor):
    """A channels-last (B, C, H, W) tensor as its (B, H, W, C) numpy array (shared memory)."""
    return t.permute(0, 2, 3, 1).numpy()


def _zero(t: Tensor):
    """0 in the tensor's numpy scalar type (the kernels keep every value in that type)."""
    return t.new_zeros(()).numpy()[()]


class _FusedPool(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, relu: bool) -> Tensor:
        from ..jit import torch_threads
        x = x.contiguous(memory_format=CL)
        b, c, h, w = x.shape
        out = torch.empty(b, c, h // 2, w // 2, dtype=x.dtype, memory_format=CL)
        idx = torch.empty(out.shape, dtype=torch.uint8, memory_format=CL)
        torch_threads()
        _kernels()[0](_nhwc(x), _nhwc(out), _nhwc(idx), relu, _zero(x))
        ctx.save_for_backward(out, idx)
        ctx.relu, ctx.in_shape = relu, x.shape
        return out

    @staticmethod
    def backward(ctx, g: Tensor):
        from ..jit import torch_threads
        out, idx = ctx.saved_tensors
        g = g.contiguous(memory_format=CL)
        gin = torch.empty(ctx.in_shape, dtype=g.dtype, memory_format=CL)
        torch_threads()
        _kernels()[1](_nhwc(g), _nhwc(out), _nhwc(idx), _nhwc(gin), ctx.relu, _zero(g))
        return gin, None


def fused_ok(x: Tensor) -> bool:
    """Whether :func:`max_pool2` takes the fused kernel for ``x``."""
    if x.device.type != "cpu" or x.dtype not in (torch.float32, torch.float64) or x.dim() != 4:
        return False
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def max_pool2(x: Tensor, relu: bool = False) -> Tensor:
    """``F.max_pool2d(x, 2)`` (then ReLU with ``relu``) of a (B, C, H, W) tensor, fused on the CPU;
    the result is channels-last there."""
    if fused_ok(x):
        return _FusedPool.apply(x, relu)
    y = F.max_pool2d(x, 2)
    return y.relu_() if relu else y
