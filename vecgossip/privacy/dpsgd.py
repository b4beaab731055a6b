"""DP-SGD's private gradient (Abadi et al. 2016, Algorithm 1), for M nodes at once:

    g_{i,b} = grad l(theta_i; x_{i,b})                     per sample (node i, sample b)
    g~_i    = ( sum_b g_{i,b} min(1, C / ||g_{i,b}||_2) + N(0, sigma^2 C^2 I) ) / B_i

Two exact paths to the clipped sum, both one batched forward of the engine's own model code:

* ``factored`` (models whose batched forward reports its layers to a :class:`PerSample` sink:
  LeNet, the CNN, the MLP): the forward of all M nodes' B samples as in training; a linear
  layer's per-sample weight gradient is the outer product g_b h_b^T of its output gradient and
  input, so its squared norm is ||g_b||^2 ||h_b||^2 and the clipped sum is one batched GEMM
  (g diag(c)) h: never materialised per sample (the "ghost norm" of Goodfellow 2015 and Li et al.
  2022); a convolution's per-sample gradient is unfold(input_b) against its output gradient
  (Opacus's grad sampler for conv), small for these models' convolutions.
* ``copies`` (any other model): one forward over M x B single-sample "nodes", each sample with its
  own copy of its node's parameters, so autograd returns one gradient per copy. The M x B x P
  gradients are the memory cost (Opacus materialises the same), so rows are processed a few
  nodes at a time (BUDGET).

The noise of node i at its local iteration s comes from its own stream, seeded by (run seed, the
node's global index, s): the same numbers whatever the chunking, the sharding or the replicas
(a replica has its own seed), and a resumed run continues them (s is in the checkpointed state)."""
from __future__ import annotations

import weakref

import numpy as np
import torch
import torch.nn.functional as F

from vecgossip.core.layers import PerSample, pair
from vecgossip.core.state import Layout

Tensor = torch.Tensor
NORM_EPS = 1e-6          # Opacus's: min(1, C / (||g|| + 1e-6))
BUDGET = 256 << 20       # bytes of per-sample gradients held at a time


FACTORED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # forward -> takes the factored path


def conv_params(layout: Layout) -> int:
    """Parameters of the layers the factored path materialises per sample (4-d weights, x 2 for
    the unfolded inputs)."""
    return 2 * sum(s.stop - s.start for s in layout.specs if len(s.shape) == 4) + 1


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


def factored_clipped_sums(forward, layout: Layout, theta: Tensor, x: Tensor, y: Tensor, weight: Tensor | None,
                          clip: float) -> tuple[Tensor, list[Tensor]] | None:
    """The ``factored`` path: (per-sample losses (M, B), [clipped per-sample sum (M, *shape) per
    parameter]), or None when the forward's sink does not account for every parameter (the
    caller then takes the ``copies`` path)."""
    m, b = y.shape
    sink = PerSample()
    params = layout.views(theta[:, :layout.params_size].detach().requires_grad_(True))
    logits = forward(params, x, sink=sink)
    if not accounts_for(sink, layout):
        return None
    ce = F.cross_entropy(logits.flatten(0, 1), y.reshape(-1), reduction="none").view(m, b)
    outs = [r.output for r in sink.convs]
    grads = torch.autograd.grad(ce.sum(), outs + [params[f"{n}.bias"] for n in sink.linear])[:len(outs)]
    sq = ce.new_zeros(m, b)
    for n in sink.linear:                                   # ||g_b h_b^T||^2 + ||g_b||^2
        f = sink[f"{n}.weight"]
        g2 = f.left.square().sum(1)                         # (M, B)
        sq += g2 * f.right.square().sum(2) + g2
    conv = {}                                               # name -> (per-sample weight (M, B, Cout, K), bias (M, B, Cout))
    for r, g in zip(sink.convs, grads):
        w = params[f"{r.name}.weight"]
        k, cin, cout = w.shape[-1], w.shape[2], w.shape[1]
        u = F.unfold(r.input.detach(), k).view(b, r.groups, cin * k * k, -1)   # (B, n, Cin k k, L)
        go = g.reshape(b, r.groups, cout, -1)                                   # (B, n, Cout, L)
        gw = torch.einsum("bnol,bnkl->nbok", go, u)
        gb = go.sum(3).transpose(0, 1)                                          # (n, B, Cout)
        if r.node is not None:
            pw, pb = conv.setdefault(r.name, (gw.new_zeros(m, b, *gw.shape[2:]), gb.new_zeros(m, b, cout)))
            pw[r.node], pb[r.node] = gw[0], gb[0]
        else:
            conv[r.name] = (gw, gb)
    for gw, gb in conv.values():
        sq += gw.square().sum((2, 3)) + gb.square().sum(2)
    scale = (clip / (sq.sqrt() + NORM_EPS)).clamp(max=1.0)
    if weight is not None:
        scale = scale * weight
    sums = {}
    for n in sink.linear:
        f = sink[f"{n}.weight"]
        left = f.left * scale.unsqueeze(1)                                      # (M, out, B)
        sums[f"{n}.weight"], sums[f"{n}.bias"] = torch.bmm(left, f.right), left.sum(2)
    for n, (gw, gb) in conv.items():
        sums[f"{n}.weight"] = torch.einsum("mb,mbok->mok", scale, gw).reshape(params[f"{n}.weight"].shape)
        sums[f"{n}.bias"] = torch.einsum("mb,mbo->mo", scale, gb)
    return ce.detach(), [sums[s.name] for s in layout.specs]


def accounts_for(sink: PerSample, layout: Layout) -> bool:
    """Whether the layers the forward reported hold every parameter, each layer once (a
    convolution once per node when run node by node, for every node)."""
    grouped = [r.name for r in sink.convs if r.node is None]
    per_node = [(r.name, r.node) for r in sink.convs if r.node is not None]
    layers = set(sink.linear) | set(grouped) | {n for n, _ in per_node}
    once = len(layers) == len(sink.linear) + len(set(grouped)) + len({n for n, _ in per_node}) \
        and len(set(grouped)) == len(grouped) and len(set(per_node)) == len(per_node)
    return once and {f"{n}.{k}" for n in layers for k in ("weight", "bias")} == {s.name for s in layout.specs}


def private_grads(forward, layout: Layout, theta: Tensor, x: Tensor, y: Tensor, weight: Tensor | None,
                  clip: float, noise_multiplier: float, noise: Tensor,
                  expected: float | None = None) -> tuple[Tensor, list[Tensor]]:
    """(losses (M,), [private gradient (M, *shape) per parameter]): the clipped per-sample sum
    plus ``noise_multiplier * clip * noise`` (``noise`` (M, params) standard normal), divided by
    each node's real sample count, or by ``expected`` (Poisson sampling: the expected batch size,
    as Opacus does, so that the sensitivity does not depend on the count drawn). Chunked over
    rows to keep the per-sample gradients in BUDGET."""
    m, b = y.shape
    batched = getattr(forward, "paths", {}).get("batched", forward)      # an engine's ExecForward: its batched path
    factored = FACTORED.get(batched) is not False
    per_row = b * (layout.params_size if not factored else conv_params(layout)) * theta.element_size() * 3
    step = max(1, BUDGET // max(1, per_row))
    losses, outs = [], []
    for lo in range(0, m, step):
        hi = min(m, lo + step)
        w = None if weight is None else weight[lo:hi]
        th, xs, ys = theta[lo:hi], x[lo:hi], y[lo:hi]
        alone = hi - lo == 1          # a lone node as a pair (core.layers.pair): its numbers do not
        if alone:                     # depend on how many nodes share its chunk (replicas, shards)
            th, xs, ys, w = pair(th, xs, ys, w)
        got = factored_clipped_sums(batched, layout, th, xs, ys, w, clip) if factored else None
        if factored:
            FACTORED[batched] = got is not None
        if got is None:
            ce, grads = per_sample_grads(forward, layout, th, xs, ys)
            sums, _ = clipped_sum(grads, clip, w)
        else:
            ce, sums = got
        if alone:
            ce, sums, w = ce[:1], [g[:1] for g in sums], None if w is None else w[:1]
        count = (torch.full((hi - lo,), float(b if expected is None else expected), dtype=theta.dtype,
                            device=theta.device) if w is None or expected is not None else w.sum(1))
        losses.append(ce.mean(1) if w is None else (ce * w).sum(1) / w.sum(1).clamp(min=1))
        out = []
        for s, g in zip(layout.specs, sums):
            z = noise[lo:hi, s.start:s.stop].view(g.shape)
            out.append((g + (noise_multiplier * clip) * z) / count.view(-1, *[1] * (g.dim() - 1)))
        outs.append(out)
    grads = [torch.cat([o[j] for o in outs]) for j in range(len(layout.specs))]
    return torch.cat(losses), grads
