"""Vectorized Caffe SGD for all nodes (REFERENCE.md, "Optimiser"; paper section III-A footnote 2).

Per node n with its own iteration count it_n:
    lr_n = base_lr * (1 + gamma * it_n) ** (-power)            ("inv" policy)
    g    = grad + weight_decay * w                             (biases decay too)
    v    = momentum * v + lr_n * lr_mult * g                   (lr_mult = 2 on biases)
    w    = w - v
The momentum buffer v is part of the node state and survives model averaging.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .stack import Layout

Tensor = torch.Tensor

LR_POLICIES = ("inv", "fixed")


@dataclass(frozen=True)
class SGDConfig:
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 5e-4
    bias_lr_mult: float = 2.0
    lr_policy: str = "inv"
    gamma: float = 1e-4
    power: float = 0.75

    def __post_init__(self) -> None:
        if self.lr_policy not in LR_POLICIES:
            raise ValueError(f"optim.lr_policy={self.lr_policy!r} is unknown; allowed: {', '.join(LR_POLICIES)}")
        for name in ("lr", "momentum", "weight_decay", "bias_lr_mult"):
            if getattr(self, name) < 0:
                raise ValueError(f"optim.{name} must be >= 0, got {getattr(self, name)}")


def node_lr(cfg: SGDConfig, iters: Tensor) -> Tensor:
    """(N,) learning rate of each node at its own iteration count."""
    if cfg.lr_policy == "fixed":
        return torch.full(iters.shape, cfg.lr, dtype=torch.float32, device=iters.device)
    return cfg.lr * (1.0 + cfg.gamma * iters.to(torch.float32)) ** (-cfg.power)


def sgd_update(theta: Tensor, momentum: Tensor, grads: list[Tensor], iters: Tensor,
               layout: Layout, cfg: SGDConfig) -> None:
    """In place on (M, P) rows: one Caffe SGD step for every row. ``grads`` holds one (M, *shape)
    gradient per parameter of ``layout``; ``iters`` (M,) is the count before this step (the first
    step uses the base lr). Works slice by slice, so no (M, P) gradient is ever assembled."""
    lr = node_lr(cfg, iters).unsqueeze(1)                                      # (M, 1)
    for s, g in zip(layout.specs, grads):
        w, v = theta[:, s.start:s.stop], momentum[:, s.start:s.stop]           # (M, n_s) views
        g = g.reshape(w.shape).add_(w, alpha=cfg.weight_decay)
        v.mul_(cfg.momentum).addcmul_(lr * (cfg.bias_lr_mult if s.is_bias else 1.0), g)
        w.sub_(v)


def loss_and_grad(forward, layout: Layout, theta: Tensor, x: Tensor, y: Tensor) -> tuple[Tensor, list[Tensor]]:
    """Per-node mean cross-entropy and its gradient for every row of theta at once.

    theta (M, P), x (M, B, 1, 28, 28), y (M, B) -> (loss (M,), [grad (M, *shape) per parameter]).
    The nodes are independent, so the gradient of the summed per-node losses is each node's own
    gradient. Gradients are taken at the per-parameter views, so autograd never materialises a
    zero-filled (M, P) buffer per slice.
    """
    leaf = theta.detach().requires_grad_(True)
    params = layout.views(leaf)
    logits = forward(params, x)                                                # (M, B, 10)
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(y.shape).mean(1)
    grads = torch.autograd.grad(loss.sum(), list(params.values()))
    return loss.detach(), list(grads)
