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


def linear(p: dict[str, Tensor], name: str, h: Tensor, sink: Sink | None = None) -> Tensor:
    """Layer ``name`` of every node: h (M, B, in) -> (M, B, out), as one batched GEMM each way.

    Every GEMM has the small (batch) operand first: on MKL, W (out, in) @ h^T (in, B) with a small B
    ran 2.5x slower than h (B, in) @ W^T (LeNet ip1, 10 nodes, 2-core EPYC), and the hand-written
    backward gives W's gradient in W's layout without a transposed copy. With ``sink`` given, the
    weight gradient lands there as :class:`Factored` instead of in autograd.
    """
    return _Linear.apply(p[f"{name}.weight"], p[f"{name}.bias"], h, sink, f"{name}.weight")
