"""Batched linear layer whose weight gradient can be handed to the optimiser as two factors.

Per node: out = h W^T + b, with W (out, in) and h (B, in). The weight gradient is dL/dW = g^T h,
with g = dL/d(out) (B, out): a rank-B product. At small batches, materialising it only to stream
it through the SGD update is most of what the linear layers cost: LeNet's ip1 gradient is a fresh
1.6 MB per node per step (page-faulted in, written, read back).
Kept as :class:`Factored`, the optimiser never allocates an (M, out, in) gradient: on the CPU it forms
each large layer's gradient node by node in one cache-resident buffer, consumed at once by a fused
SGD kernel; elsewhere one GEMM folds it into the momentum (beta = momentum). See optim.sgd_update.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

Tensor = torch.Tensor
Sink = dict  # parameter name -> Factored, filled during the backward pass


class Factored(NamedTuple):
    """A batched weight gradient left @ right: left (M, out, B), right (M, B, in)."""

    left: Tensor
    right: Tensor

    def dense(self) -> Tensor:
        return torch.bmm(self.left, self.right)


class _Linear(torch.autograd.Function):
    """out = h W^T + b for every node, with W's gradient computed by hand: into ``sink[key]`` as
    :class:`Factored` (autograd then sees None for W), or dense in W's own layout without a sink."""

    @staticmethod
    def forward(ctx, w: Tensor, b: Tensor, h: Tensor, sink: Sink | None, key: str) -> Tensor:
        ctx.save_for_backward(w, h)
        ctx.sink, ctx.key = sink, key
        return torch.baddbmm(b.unsqueeze(1), h, w.transpose(1, 2))

    @staticmethod
    def backward(ctx, g: Tensor):                                             # g (M, B, out)
        w, h = ctx.saved_tensors
        dw = None
        if ctx.sink is not None:
            ctx.sink[ctx.key] = Factored(g.detach().transpose(1, 2), h.detach())
        elif ctx.needs_input_grad[0]:
            dw = torch.bmm(g.transpose(1, 2), h)                               # (M, out, in)
        dh = torch.bmm(g, w) if ctx.needs_input_grad[2] else None
        db = g.sum(1) if ctx.needs_input_grad[1] else None
        return dw, db, dh, None, None


def pair(*tensors: Tensor | None) -> tuple[Tensor | None, ...]:
    """Each node-first tensor (1, ...) as two copies (2, ...) (None stays None). The batched GEMMs
    take another kernel for a batch of one (MKL: measured different last bits for bmm of
    (64, 784) @ (784, 100)), so a lone node is computed as a pair and the first copy kept: a node's
    numbers then do not depend on how many nodes share its chunk (or its shard, shard.py)."""
    return tuple(None if t is None else t.expand(2, *t.shape[1:]).contiguous() for t in tensors)


def linear(p: dict[str, Tensor], name: str, h: Tensor, sink: Sink | None = None) -> Tensor:
    """Layer ``name`` of every node: h (M, B, in) -> (M, B, out), as one batched GEMM each way.

    Every GEMM has the small (batch) operand first: on MKL, W (out, in) @ h^T (in, B) with a small B
    ran 2.5x slower than h (B, in) @ W^T (LeNet ip1, 10 nodes, 2-core EPYC), and the hand-written
    backward gives W's gradient in W's layout without a transposed copy. With ``sink`` given, the
    weight gradient lands there as :class:`Factored` instead of in autograd.
    """
    return _Linear.apply(p[f"{name}.weight"], p[f"{name}.bias"], h, sink, f"{name}.weight")


def to_groups(x: Tensor) -> Tensor:
    """Inputs of every node (N, B, C, H, W) as one channels-last image batch (B, N*C, H, W), the
    node axis folded into channels so that a grouped convolution (groups = N) runs all nodes.
    Measured: mkldnn grouped conv and max-pool run ~1.4x faster in NHWC on the CPU."""
    n, b, c, h, w = x.shape
    return x.transpose(0, 1).reshape(b, n * c, h, w).contiguous(memory_format=torch.channels_last)


def grouped_conv(p: dict[str, Tensor], name: str, h: Tensor, n: int) -> Tensor:
    """Conv layer ``name`` of every node: h (B, N*Cin, H, W), weight (N, Cout, Cin, k, k) ->
    (B, N*Cout, H', W'), one grouped convolution."""
    w = p[f"{name}.weight"]
    w = w.reshape(n * w.shape[1], *w.shape[2:]).contiguous(memory_format=torch.channels_last)
    return F.conv2d(h, w, p[f"{name}.bias"].reshape(-1), groups=n)


def conv_features(h: Tensor, n: int) -> Tensor:
    """(B, N*C, H, W) -> (N, B, C*H*W): each node's flattened features in nn.Module order."""
    b = h.shape[0]
    return h.reshape(b, n, -1).transpose(0, 1)


def pooled_side(s: int, kernel: int = 5) -> int:
    """Side of a feature map after two (valid conv ``kernel`` -> max-pool 2) blocks (LeNet, CNN)."""
    return ((s - kernel + 1) // 2 - kernel + 1) // 2
