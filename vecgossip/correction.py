"""Variance correction (paper Algorithm 3, section V; REFERENCE.md).

Per layer, on weights only (biases are averaged, not rescaled), with population variance over all
elements of the layer. The target variance of a layer is the mean of that layer's variances over
the models RECEIVED in the buffer (the node's own model is not included, even when beta > 0).
Applied to the final output of Eq. 1: v <- (v - mean) * sqrt(target / var) + mean, so the layer
mean is kept. For correlated models the factor is ~1, which is why it is harmless under FL.
"""
from __future__ import annotations

import torch

from .stack import Layout

Tensor = torch.Tensor


def layer_moments(theta: Tensor, layout: Layout) -> tuple[Tensor, Tensor]:
    """Per-node, per-layer weight mean and population variance: (M, L) each."""
    means, vars_ = [], []
    for s in layout.weights:
        seg = theta[:, s.start:s.stop]                                          # (M, n_l)
        v, m = torch.var_mean(seg, dim=1, correction=0)
        means.append(m)
        vars_.append(v)
    return torch.stack(means, 1), torch.stack(vars_, 1)


def layer_variance(theta: Tensor, layout: Layout) -> Tensor:
    """(M, L) population variance of each layer's weights."""
    return layer_moments(theta, layout)[1]


def rescale_(theta: Tensor, target_var: Tensor, layout: Layout, eps: float = 0.0) -> Tensor:
    """In place on (M, P): rescale each layer's weights to variance ``target_var`` (M, L) while
    keeping the layer mean. A layer with zero variance (all weights equal) is left unchanged."""
    mean, var = layer_moments(theta, layout)                                    # (M, L)
    scale = torch.where(var > eps, torch.sqrt(target_var / var.clamp_min(1e-30)), torch.ones_like(var))
    for li, s in enumerate(layout.weights):
        seg = theta[:, s.start:s.stop]
        m = mean[:, li:li + 1]
        seg.sub_(m).mul_(scale[:, li:li + 1]).add_(m)
    return theta
