"""Metrics. Paper 1 (section III-A/B, VI): per-node accuracy, reach ticks, plateau delay (Eq. 2),
per-layer weight variance (Fig. 7) and weight difference (the diff formula of section III-A).
Paper 2: accuracy on each client's own local test set, the averaged model's accuracy and the
consensus distance (1/m) sum_i ||x_i - x_bar||^2."""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from vecgossip.core.device import gpu_path
from vecgossip.core.correction import layer_variance
from vecgossip.core.layers import SharedImages, pair
from vecgossip.core.state import Layout

Tensor = torch.Tensor


@torch.no_grad()
def evaluate_per_node(forward, layout: Layout, theta: Tensor, x: Tensor, y: Tensor,
                      chunk: int = 256, images: int | None = None) -> tuple[Tensor, Tensor]:
    """Like :func:`evaluate`, but each node has its own samples: x (N, S, 1, 28, 28), y (N, S).
    ``images``: at most this many images per forward (a chunk's nodes x a block of their S
    samples; big models on large test sets); None: a chunk's nodes take all S at once. x may be
    :class:`SharedImages` (from :func:`evaluate`: the same images for every node; images None)."""
    accs, losses = [], []
    shared = isinstance(x, SharedImages)        # one image set for all nodes (metrics.evaluate)
    for lo in range(0, theta.shape[0], chunk):
        th, xs, ys = theta[lo:lo + chunk], x if shared else x[lo:lo + chunk], y[lo:lo + chunk]
        lone = th.shape[0] == 1                 # one node alone: computed as a pair (layers.pair)
        if lone:
            th, ys = pair(th, ys)
            xs = xs if shared else pair(xs)[0]
        s, keep = ys.shape[1], slice(0, 1 if lone else None)      # a lone node's row only
        if images is None or th.shape[0] * s <= images:                         # all samples at once
            logits = forward(layout.views(th, buffers=True), xs, train=False)[keep]      # (m, S, 10)
            acc = (logits.argmax(-1) == ys[keep]).float().mean(1)
            loss = F.cross_entropy(logits.transpose(1, 2), ys[keep], reduction="none").mean(1)
        else:                                                                   # blocks of samples
            block, right, ce = max(1, images // th.shape[0]), 0.0, 0.0
            for b in range(0, s, block):
                logits = forward(layout.views(th, buffers=True), xs[:, b:b + block], train=False)[keep]
                yb = ys[keep, b:b + block]
                right = right + (logits.argmax(-1) == yb).float().sum(1)
                ce = ce + F.cross_entropy(logits.transpose(1, 2), yb, reduction="none").sum(1)
            acc, loss = right / s, ce / s
        accs.append(acc)
        losses.append(loss)
    return torch.cat(accs), torch.cat(losses)


@torch.no_grad()
def evaluate_indexed(forward, layout: Layout, theta: Tensor, data, idx: Tensor,
                     chunk: int = 256, images: int | None = None) -> tuple[Tensor, Tensor]:
    """Each node on its own test images: idx (N, S) indices into ``data`` (a Dataset), gathered
    chunk by chunk so only (chunk, S) images are ever materialised -> acc (N,), loss (N,)."""
    accs, losses = [], []
    for lo in range(0, theta.shape[0], chunk):
        x, y = data.batch(idx[lo:lo + chunk])
        a, l = evaluate_per_node(forward, layout, theta[lo:lo + chunk], x, y, chunk, images)
        accs.append(a)
        losses.append(l)
    return torch.cat(accs), torch.cat(losses)


@torch.no_grad()
def evaluate_ragged(forward, layout: Layout, theta: Tensor, data, idx: Tensor, sizes: np.ndarray,
                    chunk: int = 256, images: int | None = None) -> tuple[Tensor, Tensor]:
    """Each node on ALL its own test samples, however many: idx (N, S) indices into ``data``, row
    i's first ``sizes[i]`` real, the rest padding -> acc (N,), mean loss (N,) over each node's own
    samples (text: every test window of a role). The padded matrix is walked in blocks of
    columns, each block run only for the nodes that still have samples there (``chunk`` nodes
    at a time, ``images`` samples per forward), so padding costs at most one block per node."""
    n, s = idx.shape
    device = theta.device
    right = torch.zeros(n, dtype=torch.float64, device=device)
    ce = torch.zeros(n, dtype=torch.float64, device=device)
    sizes_t = torch.as_tensor(np.asarray(sizes), device=device)
    width = max(1, min(s, (images or 4096) // max(1, min(chunk, n))))
    for b in range(0, s, width):
        rows = np.flatnonzero(np.asarray(sizes) > b)
        for lo in range(0, rows.size, chunk):
            r = torch.from_numpy(rows[lo:lo + chunk]).to(device)
            x, y = data.batch(idx[r, b:b + width])
            real = torch.arange(b, b + y.shape[1], device=device) < sizes_t[r, None]
            logits = forward(layout.views(theta.index_select(0, r), buffers=True), x, train=False)
            right.index_add_(0, r, ((logits.argmax(-1) == y) & real).sum(1).to(torch.float64))
            loss = F.cross_entropy(logits.transpose(1, 2), y, reduction="none")
            ce.index_add_(0, r, (loss * real).sum(1).to(torch.float64))
    count = sizes_t.to(torch.float64).clamp_min(1)
    return (right / count).to(theta.dtype), (ce / count).to(theta.dtype)


@torch.no_grad()
def per_image(forward, layout: Layout, theta: Tensor, data, idx: Tensor,
              batch: int = 2000) -> tuple[Tensor, Tensor]:
    """One model theta (1, P) on the images ``idx`` (E,) of ``data``: (E,) right-or-not (bool)
    and (E,) cross-entropy of every image."""
    right, loss = [], []
    for lo in range(0, idx.numel(), batch):
        x, y = data.batch(idx[lo:lo + batch])
        logits = forward(layout.views(theta, buffers=True), x.unsqueeze(0), train=False)[0]   # (b, classes)
        right.append(logits.argmax(-1) == y)
        loss.append(F.cross_entropy(logits, y, reduction="none"))
    return torch.cat(right), torch.cat(loss)


def consensus_distance(theta: Tensor, chunk: int = 256, budget: int = 64 << 20) -> float:
    """(1/m) sum_i ||x_i - x_bar||^2 over the stacked models theta (m, P), in chunks of at most
    ``chunk`` rows and ``budget`` bytes: the difference and its square are temporaries of a chunk's
    size, which at 256 rows of the CNN were two more copies of a 256-client state at every
    evaluation (measured in the scaling study's peaks)."""
    mean = theta.mean(0, keepdim=True)
    chunk = max(1, min(chunk, budget // max(1, theta.shape[1] * theta.element_size())))
    total = sum(float((theta[lo:lo + chunk] - mean).square().sum()) for lo in range(0, theta.shape[0], chunk))
    return total / theta.shape[0]


def evaluate(forward, layout: Layout, theta: Tensor, x: Tensor, y: Tensor,
             chunk: int = 256, images: int | None = None) -> tuple[Tensor, Tensor]:
    """Accuracy and mean cross-entropy of every node on one shared evaluation set.

    theta (N, P), x (E, 1, 28, 28), y (E,) -> acc (N,), loss (N,). Nodes are processed in chunks
    of ``chunk`` so the activation workspace stays bounded for large N. A forward that takes
    :class:`SharedImages` (LeNet, the CNN) gets the images once with their first-layer columns
    (unfolded here, once per evaluation, when they fit SharedImages.MAX_BYTES) instead of a
    per-node copy (issue 13 item 3).
    """
    n = theta.shape[0]
    kernel = getattr(forward, "shared_kernel", None)       # the forward takes SharedImages
    if kernel and images is None and SharedImages.fits(x, kernel):
        xs = SharedImages.of(x, kernel)
    else:
        xs = x.expand(n, *x.shape)
    return evaluate_per_node(forward, layout, theta, xs, y.expand(n, -1), chunk, images)


def reach_count(n: int, most_frac: float = 0.9) -> int:
    """Nodes needed for "most reaching": MORE than most_frac of n (46 of 50, 901 of 1000)."""
    return math.floor(most_frac * n) + 1


def first_reach_tick(ticks: np.ndarray, acc: np.ndarray, threshold: float = 0.9) -> int | None:
    """First evaluated tick at which any node has accuracy >= threshold. acc: (E, N)."""
    hit = (acc >= threshold).any(1)
    return int(ticks[np.argmax(hit)]) if hit.any() else None


def most_reach_tick(ticks: np.ndarray, acc: np.ndarray, threshold: float = 0.9,
                    most_frac: float = 0.9) -> int | None:
    """First evaluated tick at which more than most_frac of the nodes have accuracy >= threshold."""
    hit = (acc >= threshold).sum(1) >= reach_count(acc.shape[1], most_frac)
    return int(ticks[np.argmax(hit)]) if hit.any() else None


def plateau_delay_tick(ticks: np.ndarray, acc_mean: np.ndarray, t_first_average: int | None) -> int | None:
    """Eq. 2: the tick of the largest increase of mean accuracy after the first averaging.

    A'(t) is the finite difference (A_i - A_{i-1}) / (t_i - t_{i-1}) between consecutive
    evaluations; only intervals that start at or after t_first_average count; the tick returned is
    the end t_i of the steepest interval.
    """
    if t_first_average is None or len(ticks) < 2:
        return None
    slope = np.diff(acc_mean) / np.diff(ticks)
    ok = ticks[:-1] >= t_first_average
    if not ok.any():
        return None
    i = int(np.argmax(np.where(ok, slope, -np.inf)))
    return int(ticks[i + 1])


def mean_layer_variance(theta: Tensor, layout: Layout) -> Tensor:
    """(L,) per-layer weight variance, averaged over nodes (Fig. 7)."""
    return layer_variance(theta, layout).mean(0)


def weight_difference(theta: Tensor, layout: Layout, chunk: int = 256) -> Tensor:
    """(L,) diff = sum_n |w_{(n+1) mod N} - w_n|_1 / N per layer's weights (section III-A)."""
    n = theta.shape[0]
    rows = torch.arange(n, device=theta.device)
    return weight_difference_rows(theta, rows, theta[:1], layout, chunk).sum(0) / n


def weight_difference_rows(theta: Tensor, rows: Tensor, wrap: Tensor | None, layout: Layout,
                           chunk: int = 256) -> Tensor:
    """(M, L) the terms of :func:`weight_difference`: |w_next - w_n|_1 per layer's weights for the
    nodes ``rows`` (M,) of theta in order, each one's next being the following row and the last
    one's ``wrap`` (1, P) (a node sharded elsewhere, or the first row). On the CPU node by node
    through one cache-resident row buffer (a chunk-wide difference page-faults in fresh temporaries:
    benchmarks/RESULTS.md), so each term is the same 1-D sum whatever
    the shard or chunk; on a GPU ``chunk`` rows at a time (a kernel per node would dominate)."""
    if gpu_path(theta):
        out = []
        for lo in range(0, rows.numel(), chunk):
            hi = min(lo + chunk, rows.numel())
            cur, nxt = theta[rows[lo:hi]], theta[rows[lo + 1:hi + 1]]
            if hi == rows.numel():
                nxt = torch.cat([nxt, wrap])
            out.append(torch.stack([(nxt[:, s.start:s.stop] - cur[:, s.start:s.stop]).abs().sum(1)
                                    for s in layout.weights], 1))
        return torch.cat(out) if out else theta.new_zeros(0, len(layout.weights))
    idx = rows.tolist()
    m = len(idx)
    out = theta.new_empty(m, len(layout.weights))
    buf = theta.new_empty(theta.shape[1])
    for j, i in enumerate(idx):
        nxt = theta[idx[j + 1]] if j + 1 < m else wrap[0]
        torch.sub(nxt, theta[i], out=buf).abs_()
        for li, s in enumerate(layout.weights):
            out[j, li] = buf[s.start:s.stop].sum()
    return out
