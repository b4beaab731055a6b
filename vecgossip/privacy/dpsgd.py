"""DP-SGD's private gradient (Abadi et al. 2016, Algorithm 1), for M nodes at once:

    g_{i,b} = grad l(theta_i; x_{i,b})                     per sample (node i, sample b)
    g~_i    = ( sum_b g_{i,b} min(1, C / ||g_{i,b}||_2) + N(0, sigma^2 C^2 I) ) / B_i

Per-sample gradients come from ONE batched forward over M x B single-sample "nodes" (each sample
gets its own copy of its node's parameters, so autograd returns one gradient per copy): the model
code is the engine's own forward, no per-sample hooks. The M x B x P gradients are the memory cost
(Opacus materialises the same), so rows are processed ``rows_per_chunk`` nodes at a time.

The noise of node i at its local iteration s comes from its own stream, seeded by (run seed, the
node's global index, s): the same numbers whatever the chunking, the sharding or the replicas
(a replica has its own seed), and a resumed run continues them (s is in the checkpointed state)."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from vecgossip.core.state import Layout

Tensor = torch.Tensor
NORM_EPS = 1e-6          # Opacus's: min(1, C / (||g|| + 1e-6))
BUDGET = 256 << 20       # bytes of per-sample gradients held at a time


def node_noise(seeds: np.ndarray, nodes: np.ndarray, steps: np.ndarray, size: int, dtype: torch.dtype,
               device: torch.device) -> Tensor:
    """(M, size) standard normal noise, row i from the stream of (seeds[i], nodes[i], steps[i])."""
    out = torch.empty(len(nodes), size, dtype=dtype, device=device)
    gen = torch.Generator(device=device)
    for i, (seed, node, step) in enumerate(zip(np.broadcast_to(seeds, len(nodes)).tolist(), nodes.tolist(),
                                               steps.tolist())):
        key = np.random.SeedSequence([seed, node, step, 0x5D9]).generate_state(2, dtype=np.uint32)
        gen.manual_seed(int(key[0]) << 31 ^ int(key[1]))
        torch.randn(size, generator=gen, dtype=dtype, device=device, out=out[i])
    return out


def per_sample_grads(forward, layout: Layout, theta: Tensor, x: Tensor, y: Tensor) -> tuple[Tensor, list[Tensor]]:
    """Per-sample losses (M, B) and gradients [(M, B, *shape) per parameter] of the mean
    cross-entropy of each sample alone, for every row of ``theta`` (M, P), ``x`` (M, B, ...)."""
    m, b = y.shape
    copies = theta[:, :layout.params_size].detach().repeat_interleave(b, 0).requires_grad_(True)   # (M B, P)
    params = layout.views(copies)
    logits = forward(params, x.reshape(m * b, 1, *x.shape[2:]), sink=None)       # (M B, 1, classes)
    ce = F.cross_entropy(logits.flatten(0, 1), y.reshape(-1), reduction="none")   # (M B,)
    grads = torch.autograd.grad(ce.sum(), list(params.values()))
    return ce.detach().view(m, b), [g.view(m, b, *g.shape[1:]) for g in grads]


def clipped_sum(grads: list[Tensor], clip: float, weight: Tensor | None) -> tuple[list[Tensor], Tensor]:
    """sum_b g_{i,b} min(1, C / (||g_{i,b}|| + 1e-6)) over real samples (``weight`` 1, padding 0):
    ([(M, *shape)], the per-sample norms (M, B) before clipping)."""
    m, b = grads[0].shape[:2]
    norms = torch.stack([g.reshape(m, b, -1).square().sum(2) for g in grads], 0).sum(0).sqrt()   # (M, B)
    scale = (clip / (norms + NORM_EPS)).clamp(max=1.0)
    if weight is not None:
        scale = scale * weight
    return [torch.einsum("mb,mb...->m...", scale, g) for g in grads], norms


def private_grads(forward, layout: Layout, theta: Tensor, x: Tensor, y: Tensor, weight: Tensor | None,
                  clip: float, noise_multiplier: float, noise: Tensor) -> tuple[Tensor, list[Tensor]]:
    """(losses (M,), [private gradient (M, *shape) per parameter]): the clipped per-sample sum
    plus ``noise_multiplier * clip * noise`` (``noise`` (M, params) standard normal), divided by
    each node's real sample count. Chunked over rows to keep the per-sample gradients in BUDGET."""
    m, b = y.shape
    per_row = b * layout.params_size * theta.element_size() * 3
    step = max(1, BUDGET // max(1, per_row))
    losses, outs = [], []
    for lo in range(0, m, step):
        hi = min(m, lo + step)
        w = None if weight is None else weight[lo:hi]
        ce, grads = per_sample_grads(forward, layout, theta[lo:hi], x[lo:hi], y[lo:hi])
        sums, _ = clipped_sum(grads, clip, w)
        count = torch.full((hi - lo,), float(b), dtype=theta.dtype, device=theta.device) if w is None else w.sum(1)
        losses.append(ce.mean(1) if w is None else (ce * w).sum(1) / w.sum(1))
        out = []
        for s, g in zip(layout.specs, sums):
            z = noise[lo:hi, s.start:s.stop].view(g.shape)
            out.append((g + (noise_multiplier * clip) * z) / count.view(-1, *[1] * (g.dim() - 1)))
        outs.append(out)
    grads = [torch.cat([o[j] for o in outs]) for j in range(len(layout.specs))]
    return torch.cat(losses), grads
