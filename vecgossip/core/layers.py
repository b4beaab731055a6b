"""Batched linear layer whose weight gradient can be handed to the optimiser as two factors.

Per node: out = h W^T + b, with W (out, in) and h (B, in). The weight gradient is dL/dW = g^T h,
with g = dL/d(out) (B, out): a rank-B product. At small batches, materialising it only to stream
it through the SGD update is most of what the linear layers cost: LeNet's ip1 gradient is a fresh
(500 x 800 floats) buffer per node per step (page-faulted in, written, read back).
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


class ConvRecord(NamedTuple):
    """One convolution of a forward with a :class:`PerSample` sink: layer ``name``, the node it ran
    for (``node``; None: all ``groups`` nodes folded into channels), its input and output."""

    name: str
    node: int | None
    groups: int
    input: Tensor       # (B, groups*Cin, H, W) or one node's (B, Cin, H, W)
    output: Tensor      # (B, groups*Cout, H', W') or (B, Cout, H', W')


class PerSample(dict):
    """A :data:`Sink` that also lists, during the forward, the linear layers (``linear``: names)
    and the convolutions (``convs``: :class:`ConvRecord`) it saw: what DP-SGD's per-sample
    gradients are assembled from (privacy/dpsgd.py). Valid, stride-1, undilated convolutions only
    (LeNet's and the CNN's)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear: list[str] = []
        self.convs: list[ConvRecord] = []

    def conv(self, name: str, node: int | None, groups: int, inp: Tensor, out: Tensor) -> None:
        self.convs.append(ConvRecord(name, node, groups, inp, out))


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
    is the slow order (benchmarks/RESULTS.md, design measurements), and the hand-written
    backward gives W's gradient in W's layout without a transposed copy. With ``sink`` given, the
    weight gradient lands there as :class:`Factored` instead of in autograd.
    """
    if isinstance(sink, PerSample):
        sink.linear.append(name)
    return _Linear.apply(p[f"{name}.weight"], p[f"{name}.bias"], h, sink, f"{name}.weight")


def to_groups(x: Tensor) -> Tensor:
    """Inputs of every node (N, B, C, H, W) as one channels-last image batch (B, N*C, H, W), the
    node axis folded into channels so that a grouped convolution (groups = N) runs all nodes.
    mkldnn's grouped convolution and max-pool are faster in NHWC on the CPU (benchmarks/RESULTS.md)."""
    n, b, c, h, w = x.shape
    return x.transpose(0, 1).reshape(b, n * c, h, w).contiguous(memory_format=torch.channels_last)


class SharedImages(NamedTuple):
    """One batch of images that every node of a chunk evaluates (a fixed evaluation set), with its
    im2col columns for the first conv layer, unfolded once per evaluation (metrics.evaluate)."""

    images: Tensor      # (B, C, H, W)
    cols: Tensor        # (B * H' * W', C * k * k): row (b, y, x), column (c, ky, kx)

    MAX_BYTES = 64 << 20    # the columns are k*k times the images: a larger set keeps per-node copies

    @staticmethod
    def fits(images: Tensor, kernel: int) -> bool:
        """Whether the columns of ``images`` for a ``kernel`` x ``kernel`` first layer stay within
        MAX_BYTES."""
        b, c, h, w = images.shape
        return b * (h - kernel + 1) * (w - kernel + 1) * c * kernel * kernel * images.element_size() \
            <= SharedImages.MAX_BYTES

    @staticmethod
    def of(images: Tensor, kernel: int) -> "SharedImages":
        b, c = images.shape[:2]
        cols = F.unfold(images, kernel).transpose(1, 2).reshape(-1, c * kernel * kernel).contiguous()
        return SharedImages(images, cols)


def first_conv(p: dict[str, Tensor], name: str, x: Tensor | SharedImages, n: int, sink: Sink | None = None) -> Tensor:
    """The first conv layer ``name`` of n nodes -> (B, n*Cout, H', W') channels-last.

    x (N, B, C, H, W): one grouped convolution over the images folded into channels. x
    :class:`SharedImages`: the same images for every node (evaluation, issue 13 item 3), so no
    per-node copies of them: one GEMM of the shared columns against all n nodes' filters, whose
    (B*H'*W', n*Cout) result already is the channels-last layout. A forward that takes them says
    so with ``forward.shared_kernel`` (its first layer's kernel side, which metrics.evaluate
    unfolds with). Faster than the grouped path (benchmarks/evaluation.py, RESULTS.md); LeNet's conv1 output is
    bit-identical to the grouped path's (one input channel: the same 25-term sums)."""
    if not isinstance(x, SharedImages):
        return grouped_conv(p, name, to_groups(x), n, sink)
    w, b = p[f"{name}.weight"], p[f"{name}.bias"]                       # (n, Cout, C, k, k), (n, Cout)
    k, batch, width = w.shape[-1], x.images.shape[0], w[0, 0].numel()
    if x.cols.shape[1] != width:
        raise ValueError(f"SharedImages columns of width {x.cols.shape[1]} do not fit {name}'s "
                         f"{tuple(w.shape[2:])} filters (SharedImages.of takes the layer's kernel)")
    ho, wo = x.images.shape[2] - k + 1, x.images.shape[3] - k + 1
    out = torch.addmm(b.reshape(-1), x.cols, w.reshape(-1, width).t())              # (B*H'*W', n*Cout)
    return out.view(batch, ho, wo, -1).permute(0, 3, 1, 2)


def grouped_conv(p: dict[str, Tensor], name: str, h: Tensor, n: int, sink: Sink | None = None) -> Tensor:
    """Conv layer ``name`` of every node: h (B, N*Cin, H, W), weight (N, Cout, Cin, k, k) ->
    (B, N*Cout, H', W'), one grouped convolution (recorded in a :class:`PerSample` sink)."""
    w = p[f"{name}.weight"]
    w = w.reshape(n * w.shape[1], *w.shape[2:]).contiguous(memory_format=torch.channels_last)
    out = F.conv2d(h, w, p[f"{name}.bias"].reshape(-1), groups=n)
    if isinstance(sink, PerSample):
        sink.conv(name, None, n, h, out)
    return out


def client_conv(p: dict[str, Tensor], name: str, h: Tensor, i: int, sink: Sink | None = None) -> Tensor:
    """Conv layer ``name`` of node i alone: h (B, Cin, H, W) channels-last, weight p[name][i] ->
    (B, Cout, H', W') channels-last (one plain convolution, the per-node loop's call; recorded in
    a :class:`PerSample` sink)."""
    w = p[f"{name}.weight"][i].contiguous(memory_format=torch.channels_last)
    out = F.conv2d(h, w, p[f"{name}.bias"][i])
    if isinstance(sink, PerSample):
        sink.conv(name, i, 1, h, out)
    return out


def conv_features(h: Tensor, n: int) -> Tensor:
    """(B, N*C, H, W) -> (N, B, C*H*W): each node's flattened features in nn.Module order."""
    b = h.shape[0]
    return h.reshape(b, n, -1).transpose(0, 1)


def pooled_side(s: int, kernel: int = 5) -> int:
    """Side of a feature map after two (valid conv ``kernel`` -> max-pool 2) blocks (LeNet, CNN)."""
    return ((s - kernel + 1) // 2 - kernel + 1) // 2
