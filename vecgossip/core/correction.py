"""Variance correction (paper Algorithm 3, section V).

Per layer, on weights only (biases are averaged, not rescaled), with population variance over all
elements of the layer. The target variance of a layer is the mean of that layer's variances over
the models RECEIVED in the buffer (the node's own model is not included, even when beta > 0).
Applied to the final output of Eq. 1: v <- (v - mean) * sqrt(target / var) + mean, so the layer
mean is kept. For correlated models the factor is ~1, which is why it is harmless under FL.

Two passes over the (M, P) models whatever the number of layers: one read pass for the per-node,
per-layer moments, then one fused affine pass v <- v * scale + shift with shift = mean * (1 - scale).
On CUDA the affine pass is one Triton kernel for all nodes and layers; elsewhere an in-place
mul_/add_ per layer. ``rescale_reference_`` is the literal three-op formula, kept for tests and benchmarks.
"""
from __future__ import annotations

from functools import lru_cache

import torch

from vecgossip.core.device import gpu_path
from vecgossip.core.state import Layout

Tensor = torch.Tensor


def layer_moments(theta: Tensor, layout: Layout) -> tuple[Tensor, Tensor]:
    """Per-node, per-layer weight mean and population variance: (M, L) each.

    Computed as var = E[x^2] - mean^2 from a row sum and a row 2-norm (two fast reductions; torch.var_mean
    measured several times slower on the CPU: benchmarks/RESULTS.md, design measurements). Weights have |mean| << std, so the cancellation is
    harmless; the result is clamped at 0.
    """
    means, vars_ = [], []
    for s in layout.weights:
        seg = theta[:, s.start:s.stop]                                          # (M, n_l)
        m = seg.sum(1) / s.numel
        sq = torch.linalg.vector_norm(seg, dim=1).square_() / s.numel
        means.append(m)
        vars_.append((sq - m * m).clamp_min_(0))
    return torch.stack(means, 1), torch.stack(vars_, 1)


def layer_variance(theta: Tensor, layout: Layout) -> Tensor:
    """(M, L) population variance of each layer's weights."""
    return layer_moments(theta, layout)[1]


def rescale_factors(theta: Tensor, target_var: Tensor, layout: Layout) -> tuple[Tensor, Tensor]:
    """(scale, shift) (M, L) so that v * scale + shift has variance target_var and the same mean.
    A layer with zero variance (all weights equal) keeps scale 1."""
    mean, var = layer_moments(theta, layout)                                    # (M, L)
    scale = torch.where(var > 0, torch.sqrt(target_var / var.clamp_min(1e-30)), torch.ones_like(var))
    return scale, mean * (1 - scale)


def rescale_reference_(theta: Tensor, target_var: Tensor, layout: Layout) -> Tensor:
    """Algorithm 3 line 11 as written: (v - mean) * sigma_target / sigma + mean, layer by layer."""
    mean, var = layer_moments(theta, layout)
    scale = torch.where(var > 0, torch.sqrt(target_var / var.clamp_min(1e-30)), torch.ones_like(var))
    for li, s in enumerate(layout.weights):
        seg = theta[:, s.start:s.stop]
        m = mean[:, li:li + 1]
        seg.sub_(m).mul_(scale[:, li:li + 1]).add_(m)
    return theta


CPU_CACHE_BYTES = 16 << 20  # rows per chunk so that moments + affine pass reuse the CPU cache


def rescale_(theta: Tensor, target_var: Tensor, layout: Layout, impl: str = "auto") -> Tensor:
    """In place on (M, P): rescale each layer's weights to variance ``target_var`` (M, L) keeping
    the layer mean. ``impl``: auto (Triton on CUDA, else torch) | torch | triton.

    On the CPU, rows are processed in chunks of ~16 MiB so that the affine pass re-reads what the
    moments pass just brought into cache (the bandwidth gained: benchmarks/RESULTS.md)."""
    if impl == "triton" or (impl == "auto" and gpu_path(theta)):
        scale, shift = rescale_factors(theta, target_var, layout)
        if impl == "triton" or (theta.is_cuda and _triton_ok()):
            from vecgossip.core.kernels import affine_by_layer_
            affine_by_layer_(theta, layer_ids(layout, theta.device), scale, shift)
        else:        # the GPU path without Triton (or forced on a CPU): the same pass as one torch op
            torch.ops.vecgossip.affine_by_layer_(theta, layer_ids(layout, theta.device), scale, shift)
        return theta
    rows = max(1, CPU_CACHE_BYTES // (theta.shape[1] * theta.element_size()))
    for lo in range(0, theta.shape[0], rows):
        th = theta[lo:lo + rows]
        scale, shift = rescale_factors(th, target_var[lo:lo + rows], layout)
        for li, s in enumerate(layout.weights):
            # measured: in-place mul_ + add_ is ~2x faster on CPU than addcmul(out=seg)
            th[:, s.start:s.stop].mul_(scale[:, li:li + 1]).add_(shift[:, li:li + 1])
    return theta


@torch.library.custom_op("vecgossip::affine_by_layer_", mutates_args=("x",))
def affine_by_layer_torch_(x: Tensor, layer_id: Tensor, scale: Tensor, shift: Tensor) -> None:
    """The Triton kernel's pass (:func:`vecgossip.core.kernels.affine_by_layer_`) in torch ops:
    x (M, P) <- x * scale[:, layer(x)] + shift[:, layer(x)], identity on the biases (layer id L).
    One registered op, so that a launch count sees one pass, as the kernel is on a GPU."""
    ones = torch.ones(x.shape[0], 1, dtype=scale.dtype, device=scale.device)
    lid = layer_id.long()
    x.mul_(torch.cat([scale, ones], 1)[:, lid]).add_(torch.cat([shift, ones - 1], 1)[:, lid])


@lru_cache(maxsize=16)
def layer_ids(layout: Layout, device: torch.device) -> Tensor:
    """(P,) int8: the weight-layer index of every element; biases get index L (identity slot)."""
    ids = torch.full((layout.size,), len(layout.weights), dtype=torch.int8)
    for li, s in enumerate(layout.weights):
        ids[s.start:s.stop] = li
    return ids.to(device)


@lru_cache(maxsize=1)
def _triton_ok() -> bool:
    import importlib.util
    return importlib.util.find_spec("triton") is not None
