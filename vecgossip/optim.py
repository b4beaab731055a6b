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

from .models.layers import Factored
from .stack import Layout

Tensor = torch.Tensor

LR_POLICIES = ("inv", "fixed")
# On the CPU, a factored update of a layer at least this large per node runs node by node, so the
# node's gradient, momentum and weights stay in cache: LeNet ip1 (1.6 MB), 50 nodes: 10.6 ms node by
# node with the fused kernel vs 12 ms node by node in three passes vs ~17 ms batched (2-core EPYC).
PER_NODE_BYTES = 1 << 20
_FUSED_SGD = getattr(torch, "_fused_sgd_", None)


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


def sgd_update(theta: Tensor, momentum: Tensor, grads: list[Tensor | Factored], iters: Tensor,
               layout: Layout, cfg: SGDConfig) -> None:
    """In place on (M, P) rows: one Caffe SGD step for every row. ``grads`` holds one (M, *shape)
    gradient per parameter of ``layout``, or its :class:`Factored` form; ``iters`` (M,) is the count
    before this step (the first step uses the base lr). Works slice by slice, so no (M, P) gradient
    is ever assembled."""
    lr = node_lr(cfg, iters).unsqueeze(1)                                      # (M, 1)
    for s, g in zip(layout.specs, grads):
        w, v = theta[:, s.start:s.stop], momentum[:, s.start:s.stop]           # (M, n_s) views
        step = lr * (cfg.bias_lr_mult if s.is_bias else 1.0)
        if isinstance(g, Factored):
            _factored_update(w, v, g, step, cfg)
            continue
        g = g.reshape(w.shape).add_(w, alpha=cfg.weight_decay)
        v.mul_(cfg.momentum).addcmul_(step, g)
        w.sub_(v)


def _factored_update(w: Tensor, v: Tensor, g: Factored, step: Tensor, cfg: SGDConfig) -> None:
    """The same Caffe step with the gradient G = left @ right (M, out, in) never stored whole:
    v = momentum v + step (G + wd w);  w -= v."""
    out, inp = g.left.shape[1], g.right.shape[2]
    left = g.left * step.unsqueeze(2)                                          # (M, out, B): small
    decay = step * cfg.weight_decay                                            # (M, 1)
    if w.device.type == "cpu" and w.shape[1] * w.element_size() >= PER_NODE_BYTES:
        # node by node: step * G_n goes to a cache-resident buffer and torch's fused CPU SGD kernel
        # (the one behind SGD(fused=True)) streams w and v once. With lr = 1 and weight decay
        # step * wd it computes v = momentum v + (step G + step wd w); w -= v: Caffe's step.
        buf = torch.empty(out, inp, dtype=w.dtype)
        for i, wd_i in enumerate(decay.flatten().tolist()):
            wi, vi = w[i].view(out, inp), v[i].view(out, inp)
            torch.mm(left[i], g.right[i], out=buf)
            if _FUSED_SGD is None:  # a torch without the kernel: the same math in two passes
                vi.mul_(cfg.momentum).add_(buf).add_(wi, alpha=wd_i)
                wi.sub_(vi)
                continue
            _FUSED_SGD([wi], [buf], [vi], weight_decay=wd_i, momentum=cfg.momentum, lr=1.0,
                       dampening=0.0, nesterov=False, maximize=False, is_first_step=False)
        return
    # one GEMM folds the gradient into the momentum (beta = momentum), then two streaming passes
    v.view(-1, out, inp).baddbmm_(left, g.right, beta=cfg.momentum)
    v.addcmul_(w, decay)
    w.sub_(v)


def loss_and_grad(forward, layout: Layout, theta: Tensor, x: Tensor, y: Tensor,
                  factored: bool = True) -> tuple[Tensor, list[Tensor | Factored]]:
    """Per-node mean cross-entropy and its gradient for every row of theta at once.

    theta (M, P), x (M, B, 1, 28, 28), y (M, B) -> (loss (M,), [grad per parameter]), each grad
    (M, *shape), or :class:`Factored` for linear weights when ``factored`` and the forward supports
    it. The nodes are independent, so the gradient of the summed per-node losses is each node's own
    gradient. Gradients are taken at the per-parameter views, so autograd never materialises a
    zero-filled (M, P) buffer per slice.
    """
    leaf = theta.detach().requires_grad_(True)
    params = layout.views(leaf)
    sink: dict[str, Factored] = {}
    logits = forward(params, x, sink=sink if factored else None)               # (M, B, 10)
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(y.shape).mean(1)
    grads = torch.autograd.grad(loss.sum(), list(params.values()), allow_unused=factored)
    out: list[Tensor | Factored] = []
    for name, g in zip(params, grads):
        g = sink.get(name) if g is None else g
        if g is None:
            raise RuntimeError(f"no gradient for {name}: the forward does not use this parameter")
        out.append(g)
    return loss.detach(), out
