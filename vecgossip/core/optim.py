"""Vectorized local optimisers for all nodes.

Paper 1, Caffe SGD (paper section III-A, footnote 2), per node n with its
own iteration count it_n:
    lr_n = base_lr * (1 + gamma * it_n) ** (-power)            ("inv" policy)
    g    = grad + weight_decay * w                             (biases decay too)
    v    = momentum * v + lr_n * lr_mult * g                   (lr_mult = 2 on biases)
    w    = w - v
Paper 2, PyTorch's SGD (torch.optim.SGD, dampening 0), lr_t = lr_0 * decay^t in round t:
    v = momentum * v + (grad + weight_decay * w);   w = w - lr_t * v
and its SAM local step (Foret et al.; DFedSAM's y <- y - lr grad F_i(y + rho g / ||g||_2)):
    g = grad F_i(y; xi);  e = rho g / (||g||_2 + 1e-12)  (the norm over the client's whole model);
    then the SGD step above with grad F_i(y + e; xi) (same minibatch xi), decay on y itself.
Both are one rule, v = momentum v + s (g + wd w); w -= lr v (Caffe: s = lr_n * lr_mult, lr = 1;
PyTorch: s = 1, lr = lr_t): :func:`momentum_sgd_`. The momentum buffer v is part of the node state
and survives model averaging (paper 1) and rounds (paper 2, unless ``reset_momentum``).
"""
from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
import torch
import torch.nn.functional as F

from pydantic import Field

from vecgossip.core.device import gpu_path
from vecgossip.core.layers import Factored, pair
from vecgossip.core.options import Options
from vecgossip.core.state import Layout

Tensor = torch.Tensor

LR_POLICIES = ("inv", "fixed")   # SGDConfig.lr_policy
# On the CPU, a factored update of a layer at least this large per node runs node by node, so the
# node's gradient, momentum and weights stay in cache: LeNet ip1 (1.6 MB), 50 nodes: 10.6 ms node by
# node with the fused kernel vs 12 ms node by node in three passes vs ~17 ms batched (2-core EPYC).
PER_NODE_BYTES = 1 << 20
_FUSED_SGD = getattr(torch, "_fused_sgd_", None)


NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Momentum = Annotated[float, Field(ge=0, lt=1)]     # a momentum of 1 or more never forgets: it diverges


class SGDConfig(Options):
    """Paper 1's local optimiser, Caffe's SGD of the LeNet example (paper footnote 2): the tick
    engine's ``optim`` group (``conf/optim/caffe_sgd.yaml``)."""

    lr: NonNegative = 0.01                    # base learning rate
    momentum: Momentum = 0.9
    weight_decay: NonNegative = 5e-4          # biases decay too (Caffe)
    bias_lr_mult: NonNegative = 2.0           # a bias's lr is this times the weights'
    lr_policy: Literal["inv", "fixed"] = "inv"   # inv: lr (1 + gamma it)^-power, it = the node's own steps
    gamma: NonNegative = 1e-4                 # the inv policy's gamma
    power: NonNegative = 0.75                 # the inv policy's power


def node_lr(cfg: SGDConfig, iters: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """(N,) learning rate of each node at its own iteration count, in ``dtype`` (the state's)."""
    if cfg.lr_policy == "fixed":
        return torch.full(iters.shape, cfg.lr, dtype=dtype, device=iters.device)
    return cfg.lr * (1.0 + cfg.gamma * iters.to(dtype)) ** (-cfg.power)


def sgd_update(theta: Tensor, momentum: Tensor, grads: list[Tensor | Factored], iters: Tensor,
               layout: Layout, cfg: SGDConfig) -> None:
    """In place on (M, P) rows: one Caffe SGD step for every row. ``grads`` holds one (M, *shape)
    gradient per parameter of ``layout``, or its :class:`Factored` form; ``iters`` (M,) is the count
    before this step (the first step uses the base lr). Works slice by slice, so no (M, P) gradient
    is ever assembled."""
    lr = node_lr(cfg, iters, theta.dtype).unsqueeze(1)                         # (M, 1)
    for s, g in zip(layout.specs, grads):
        w, v = theta[:, s.start:s.stop], momentum[:, s.start:s.stop]           # (M, n_s) views
        step = lr * (cfg.bias_lr_mult if s.is_bias else 1.0)
        momentum_sgd_(w, v, g, step, cfg.weight_decay, cfg.momentum, 1.0)


def _node_step(wi: Tensor, vi: Tensor, left: Tensor, right: Tensor, buf: Tensor, wd: float, momentum: float,
               lr: float) -> None:
    """One node's factored step, w and v (out, in) views: s G = left @ right into the cache-resident
    ``buf`` and torch's fused CPU SGD kernel (the one behind SGD(fused=True)) streams w and v once.
    With weight decay ``wd`` (= s wd) it computes v = momentum v + (s G + wd w); w -= lr v."""
    torch.mm(left, right, out=buf)
    if _FUSED_SGD is None:  # a torch without the kernel: the same math in two passes
        vi.mul_(momentum).add_(buf).add_(wi, alpha=wd)
        wi.add_(vi, alpha=-lr)
        return
    _FUSED_SGD([wi], [buf], [vi] if momentum else [], weight_decay=wd, momentum=momentum,
               lr=lr, dampening=0.0, nesterov=False, maximize=False, is_first_step=False)


def sgd_update_rows(theta: Tensor, momentum: Tensor, rows: np.ndarray, grads: list[Tensor | Factored],
                    iters: Tensor, layout: Layout, cfg: SGDConfig) -> Tensor:
    """:func:`sgd_update` for the ``rows`` (M,) (host indices, no repeats) of a CPU state theta /
    momentum (N, P), on the rows where they lie: no gather of them and no write-back. ``grads``
    as there, for those rows in order; ``iters`` (M,) theirs. Each parameter's scaled gradient
    s g goes to an (M, n) workspace (a factored one by one GEMM; one a node by node where a node's
    layer is at least :data:`PER_NODE_BYTES`: then torch's fused kernel node by node, as
    :func:`sgd_update`) and one pass of :func:`vecgossip.core.row_kernels.momentum_rows` updates the
    rows' momentum and weights. Returns (M,) in the state's dtype: each row's sum of its new
    parameters (the divergence guard's: only their finiteness is meaningful; in float32 a sum
    overflows past ~1e38, as ``theta.sum(1)``)."""
    from vecgossip.core.jit import use_torch_threads
    from vecgossip.core.row_kernels import momentum_rows, scalar
    use_torch_threads()
    w_np, v_np = theta.detach().numpy(), momentum.numpy()
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    m = rows.size
    lr = node_lr(cfg, iters, theta.dtype).unsqueeze(1)                         # (M, 1)
    mom, one = scalar(cfg.momentum, w_np), scalar(1.0, w_np)
    sums = np.zeros(m, dtype=w_np.dtype)            # the guard's row sums, in the state's dtype (as theta.sum(1))
    for s, g in zip(layout.specs, grads):
        scale = lr * (cfg.bias_lr_mult if s.is_bias else 1.0)                 # (M, 1)
        decay = (scale * cfg.weight_decay).flatten().numpy()
        if isinstance(g, Factored):
            left = g.left * scale.unsqueeze(2)                                 # (M, out, B): small
            out, inp = left.shape[1], g.right.shape[2]
            if out * inp * theta.element_size() >= PER_NODE_BYTES:              # node by node, in cache
                buf = torch.empty(out, inp, dtype=theta.dtype)
                for i, r in enumerate(rows.tolist()):
                    wi = theta[r, s.start:s.stop].view(out, inp)
                    _node_step(wi, momentum[r, s.start:s.stop].view(out, inp), left[i], g.right[i], buf,
                               float(decay[i]), cfg.momentum, 1.0)
                    sums[i] += wi.sum().item()
                continue
            g = torch.bmm(left, g.right).view(m, -1)                           # (M, n) = s G
        else:
            g = g.reshape(m, -1) * scale
        momentum_rows(w_np, v_np, rows, s.start, g.numpy(), decay, mom, one, sums)
    return torch.from_numpy(sums)


def momentum_sgd_(w: Tensor, v: Tensor, g: Tensor | Factored, scale: Tensor | None, weight_decay: float,
                  momentum: float, lr: float) -> None:
    """In place on one parameter of M nodes, w and v (M, n) views, g (M, *shape) or Factored:
    v = momentum v + s (g + wd w);  w -= lr v, with s = ``scale`` (M, 1) per node (None: 1).
    Caffe: s = lr_n * lr_mult, lr = 1. PyTorch's SGD (dampening 0): s = 1, lr = lr_t."""
    if isinstance(g, Factored):
        _factored_update(w, v, g, scale, weight_decay, momentum, lr)
        return
    g = g.reshape(w.shape).add_(w, alpha=weight_decay)
    v.mul_(momentum)
    if scale is None:
        v.add_(g)
    else:
        v.addcmul_(scale, g)
    w.add_(v, alpha=-lr)


def _factored_update(w: Tensor, v: Tensor, g: Factored, scale: Tensor | None, weight_decay: float,
                     momentum: float, lr: float) -> None:
    """The same step with the gradient G = left @ right (M, out, in) never stored whole:
    v = momentum v + s (G + wd w);  w -= lr v."""
    out, inp = g.left.shape[1], g.right.shape[2]
    m = g.left.shape[0]
    if scale is None:
        scale = torch.ones(m, 1, dtype=w.dtype, device=w.device)
    left = g.left * scale.unsqueeze(2)                                         # (M, out, B): small
    decay = scale * weight_decay                                               # (M, 1)
    if not gpu_path(w) and w.shape[1] * w.element_size() >= PER_NODE_BYTES:
        # node by node: s * G_n goes to a cache-resident buffer and torch's fused CPU SGD kernel
        # (the one behind SGD(fused=True)) streams w and v once. With weight decay s * wd it
        # computes v = momentum v + (s G + s wd w); w -= lr v.
        buf = torch.empty(out, inp, dtype=w.dtype)
        for i, wd_i in enumerate(decay.flatten().tolist()):
            _node_step(w[i].view(out, inp), v[i].view(out, inp), left[i], g.right[i], buf, wd_i, momentum, lr)
        return
    # one GEMM folds the gradient into the momentum (beta = momentum), then two streaming passes
    v.view(-1, out, inp).baddbmm_(left, g.right, beta=momentum)
    v.addcmul_(w, decay)
    w.add_(v, alpha=-lr)


def loss_and_grad(forward, layout: Layout, theta: Tensor, x: Tensor, y: Tensor,
                  factored: bool = True, weight: Tensor | None = None) -> tuple[Tensor, list[Tensor | Factored]]:
    """Per-node mean cross-entropy and its gradient for every row of theta at once.

    theta (M, P), x (M, B, C, H, W), y (M, B) -> (loss (M,), [grad per parameter]), each grad
    (M, *shape), or :class:`Factored` for linear weights when ``factored`` and the forward supports
    it. ``weight`` (M, B) of 1s and 0s makes the loss the mean over the weighted samples only (a
    client's short last batch of an epoch, padded to B). The nodes are independent, so the
    gradient of the summed per-node losses is each node's own gradient. BatchNorm running statistics
    (``layout.buffers``) are updated in theta's buffer columns, as a module's training forward
    updates its buffers (momentum 0.1). Gradients are taken at the
    per-parameter views, so autograd never materialises a zero-filled (M, P) buffer per slice.
    One node is computed as two copies of it (:func:`vecgossip.core.layers.pair`), so that a node's
    numbers do not depend on the chunk it falls in.
    """
    if theta.shape[0] == 1 and not getattr(forward, "per_client", False):   # per client: alone anyway
        th2, x2, y2, w2 = pair(theta, x, y, weight)
        loss, grads = loss_and_grad(forward, layout, th2, x2, y2, factored=factored, weight=w2)
        if layout.buffers:                    # the running statistics the first copy updated
            theta[:, layout.params_size:] = th2[:1, layout.params_size:]
        return loss[:1], [Factored(g.left[:1], g.right[:1]) if isinstance(g, Factored) else g[:1] for g in grads]
    leaf = theta.detach().requires_grad_(True)
    params = layout.views(leaf)
    running = layout.buffer_copies(theta)        # BatchNorm: updated by this training forward
    sink: dict[str, Factored] = {}
    logits = forward(params | running, x, sink=sink if factored else None)   # (M, B, classes)
    ce = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(y.shape)
    loss = ce.mean(1) if weight is None else (ce * weight).sum(1) / weight.sum(1)
    grads = torch.autograd.grad(loss.sum(), list(params.values()), allow_unused=factored)
    out: list[Tensor | Factored] = []
    for name, g in zip(params, grads):
        g = sink.get(name) if g is None else g
        if g is None:
            raise RuntimeError(f"no gradient for {name}: the forward does not use this parameter")
        out.append(g)
    if running:
        layout.store_buffers(theta, running)
    return loss.detach(), out


class LocalSGDConfig(Options):
    """Paper 2's local optimiser: PyTorch SGD at lr_t = lr * lr_decay^t in round t, optionally with
    SAM (``sam``, radius ``rho``). ``reset_momentum``: clear every client's momentum buffer at the
    start of each round (a fresh torch.optim.SGD per round, as the DisPFL/DFedSAM code does);
    default false: buffers persist across rounds per client. The round engine's ``optim`` group
    (``conf/optim/sgd.yaml``)."""

    lr: NonNegative = 0.1                     # lr_0
    lr_decay: Annotated[float, Field(gt=0, le=1)] = 0.998   # lr_t = lr_0 lr_decay^t
    momentum: Momentum = 0.0
    weight_decay: NonNegative = 5e-4
    sam: bool = False                         # SAM local steps (FedSAM; DFedSAM forces them)
    rho: NonNegative = 0.05                   # SAM radius
    reset_momentum: bool = False              # a fresh momentum buffer every round

    def lr_at(self, round_: int) -> float:
        return self.lr * self.lr_decay ** round_


SAM_EPS = 1e-12  # added to ||g||_2 (as in Foret et al.'s reference code): a zero gradient stays finite


def sam_point(theta: Tensor, grads: list[Tensor], layout: Layout, rho: float) -> Tensor:
    """(M, P) y + rho g / (||g||_2 + eps) per row, ||g||_2 over each node's whole model (SAM's
    ascent step). ``grads``: dense per-parameter gradients (M, *shape). One node is computed as
    two copies of it: a lone row's reduction is split across threads, which changes its last bits
    (the same reason as :func:`vecgossip.core.layers.pair`)."""
    if theta.shape[0] == 1:
        return sam_point(theta.expand(2, -1), [g.expand(2, *g.shape[1:]) for g in grads], layout, rho)[:1]
    sq = torch.stack([g.reshape(g.shape[0], -1).square().sum(1) for g in grads], 1).sum(1)   # (M,)
    scale = (rho / (sq.sqrt() + SAM_EPS)).unsqueeze(1)                                       # (M, 1)
    out = theta.clone()
    for s, g in zip(layout.specs, grads):
        out[:, s.start:s.stop].addcmul_(g.reshape(g.shape[0], -1), scale)
    return out


_SCRATCH: dict = {}


def _scratch_like(theta: Tensor) -> Tensor:
    """A buffer of theta's shape kept across calls (one per shape, dtype and device): a fresh
    ResNet-18 row (11.2 M floats) is above glibc's largest mmap threshold (32 MB), so allocating it every
    step maps and page-faults it in every step."""
    key = (tuple(theta.shape), theta.dtype, theta.device)
    buf = _SCRATCH.get(key)
    if buf is None:
        _SCRATCH.clear()                  # one at a time: a run uses one shape
        buf = _SCRATCH[key] = torch.empty_like(theta)
    return buf


def sam_point_one(theta: Tensor, grads: list[Tensor], layout: Layout, rho: float) -> Tensor:
    """:func:`sam_point` for one client on the per-client path (``model.exec``), as a per-client
    loop computes it: ||g||_2 as the norm of the per-parameter norms, y + rho g / (||g||_2 + eps)
    written into a buffer kept across steps. Not paired: on this path a client is always alone, so
    its numbers do not depend on a chunk (the batched path's values agree to float tolerance,
    tests/test_execution.py)."""
    norm = float(torch.linalg.vector_norm(torch.stack(torch._foreach_norm(list(grads)))))
    out = _scratch_like(theta)
    out.copy_(theta)
    torch._foreach_add_([out[:, s.start:s.stop].view(g.shape) for s, g in zip(layout.specs, grads)],
                        list(grads), alpha=rho / (norm + SAM_EPS))
    return out


def local_step(forward, layout: Layout, theta: Tensor, momentum: Tensor, x: Tensor, y: Tensor,
               weight: Tensor | None, lr: float, cfg: LocalSGDConfig) -> Tensor:
    """One local iteration of M clients in place on theta/momentum (M, P): SGD, or SAM when
    ``cfg.sam`` (two gradients on the same minibatch). Returns the loss at y (M,). BatchNorm
    running statistics move with the first forward only (at y, not at the perturbed point), as
    the common PyTorch SAM code (davda54/sam's ``disable_running_stats``) does."""
    alone = theta.shape[0] == 1 and getattr(forward, "per_client", False)
    if cfg.sam:
        loss, g = loss_and_grad(forward, layout, theta, x, y, factored=False, weight=weight)
        point = (sam_point_one if alone else sam_point)(theta, g, layout, cfg.rho)
        _, grads = loss_and_grad(forward, layout, point, x, y, weight=weight)
    else:
        loss, grads = loss_and_grad(forward, layout, theta, x, y, weight=weight)
    if alone and not gpu_path(theta):
        # one client on the per-client path (model.exec): its parameter slices are contiguous, and
        # torch's fused SGD kernel (what a fair per-client loop uses) updates them in one pass over
        # w, g and v instead of four (execution.py; the same update: v = mu v + g + wd w, w -= lr v)
        ws = [theta[:, s.start:s.stop].view(g.shape) for s, g in zip(layout.specs, grads)]
        vs = [momentum[:, s.start:s.stop].view(g.shape) for s, g in zip(layout.specs, grads)]
        torch._fused_sgd_(ws, list(grads), vs if cfg.momentum else [], weight_decay=cfg.weight_decay,
                          momentum=cfg.momentum, lr=lr,
                          dampening=0.0, nesterov=False, maximize=False, is_first_step=False)
        return loss
    for s, g in zip(layout.specs, grads):
        momentum_sgd_(theta[:, s.start:s.stop], momentum[:, s.start:s.stop], g, None,
                      cfg.weight_decay, cfg.momentum, lr)
    return loss
