"""Weight compression (paper section III-C2) on the CPU: sparse sends.

Along every link, each element of the sender's model arrives independently with probability p; the
receiver fills the unsent elements with its own current weights. Drawing one uniform per element
costs links x P random numbers per tick (17 M per tick at N = 50, k = 8, T_acq = 10 with LeNet),
which on a CPU is most of the tick. Here the sent positions of a link are drawn as the arrivals of
a Bernoulli(p) process: the gaps between consecutive sent positions are i.i.d. Geometric(p) on
{1, 2, ...}, which is exactly the same distribution (every element sent independently with
probability p, links independent) from about p x P draws per link. The receiver's buffer then takes,
per link, the receiver's own model plus the sparse differences at the sent positions; the per-layer
variances of the arrived models follow from the same sparse differences. (A GPU draws every
element instead, in one kernel for all links: :mod:`.masked_send`.)
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch

from vecgossip.core.correction import layer_moments
from vecgossip.core.state import Layout

Tensor = torch.Tensor


@lru_cache(maxsize=16)
def _bounds(layout: Layout, device: str) -> tuple[Tensor, Tensor]:
    """(2L,) [start, stop] of every weight layer, and (L,) their sizes as float64."""
    w = layout.weights
    return (torch.tensor([[s.start, s.stop] for s in w], device=device).flatten(),
            torch.tensor([s.numel for s in w], dtype=torch.float64, device=device))


def link_moments(recv: Tensor, rows: Tensor, own: Tensor, layout: Layout) -> tuple[Tensor, Tensor]:
    """Per link (E,), the weight-layer mean and variance (E, L) of its receiver's own model, from
    the receivers' models ``own`` (R, P) at the sorted unique receivers ``rows`` (R,)."""
    mean_u, var_u = layer_moments(own, layout)                               # (R, L)
    at = torch.searchsorted(rows, recv)
    return mean_u[at], var_u[at]


def add_link_variances(var_total: Tensor, recv: Tensor, s1: Tensor, s2: Tensor, mean_r: Tensor,
                       var_r: Tensor, layout: Layout) -> None:
    """``var_total[r] +=`` each link's layer variances, from the receiver's own layer moments
    ``mean_r``, ``var_r`` (E, L) and the sums over the layer's sent elements (float64, (E, L)):
    s1 = sum d and s2 = sum d (theta_s + theta_r), d = theta_s - theta_r (:func:`deliver_cpu`)."""
    _, numel = _bounds(layout, str(s1.device))
    s2 = s2 - 2 * mean_r.double() * s1
    var = (var_r.double() + s2 / numel - (s1 / numel) ** 2).clamp_min_(0)
    var_total.index_add_(0, recv, var.to(var_total.dtype))


# -- the fused CPU path ---------------------------------------------------------------------------
# On the CPU the whole compressed delivery runs as one numba kernel, parallel over receivers: per
# link, the gaps between sent positions are drawn from a counter-based generator (SplitMix64 of
# key + (link << 32 | counter)), so a link's positions depend only on (key, link id) and not on
# the thread, the shard or the chunk; the sender's elements are read at those positions and the
# differences added into the receiver's buffer row in the same pass. A gap is drawn by inverting
# the Geometric(p) law with a table (one 64-bit draw, a guide-table lookup and ~1 comparison; the
# tail beyond the table, probability < 2^-20, by logarithm), which measured ~3x faster than one
# log per sent element. Measured (benchmarks/compression.py): see benchmarks/RESULTS.md.

TABLE_TAIL_BITS = 20       # the table covers all gaps but a tail of probability < 2^-20


@lru_cache(maxsize=32)
def gap_table(p: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Inversion table of G - 1 ~ Geometric(p) on {0, 1, ...}, P(G - 1 >= k) = (1 - p)^k: ``cdf[k]``
    = P(G - 1 <= k) x 2^64 as uint64 for k < K (K: the tail beyond has probability < 2^-20, at most
    4096 entries), ``guide[i]`` = the first k with cdf[k] > i x 2^56 (256 buckets of the top 8
    bits), and 1 / log(1 - p) for the tail. A 64-bit draw x gives k = the first index with
    x < cdf[k]: P(k) = (cdf[k] - cdf[k-1]) / 2^64, the law up to 2^-64 rounding of its CDF."""
    log_q = math.log1p(-p)
    k = int(min(4096, max(1, math.ceil(TABLE_TAIL_BITS * math.log(2) / -log_q))))
    cdf = -np.expm1(np.arange(1, k + 1) * log_q)                     # P(G - 1 <= j), j = 0 .. K-1
    c = np.minimum(np.ldexp(cdf, 64), 2.0**64 - 2048).astype(np.uint64)
    guide = np.searchsorted(c, np.arange(256, dtype=np.uint64) << np.uint64(56), side="right").astype(np.int64)
    return c, guide, 1.0 / log_q


_KERNELS = None


def kernels():
    """The numba kernels (:mod:`.sparse_kernels`), compiled once and cached on disk; imported
    lazily so that the GPU path and the rest of the package do not need numba's JIT."""
    global _KERNELS
    if _KERNELS is None:
        from vecgossip.engines.tick import sparse_kernels
        _KERNELS = sparse_kernels.positions, sparse_kernels.deliver
    return _KERNELS


def link_positions(key: int, link: int, size: int, p: float) -> np.ndarray:
    """The sent positions (increasing) of link ``link`` under ``key`` on the fused CPU path: what
    :func:`deliver_cpu` sends along it (for tests and inspection)."""
    cdf, guide, inv_log = gap_table(p)
    out = np.empty(size, dtype=np.int64)
    count = kernels()[0](np.uint64(key), link, size, cdf, guide, inv_log, out)
    return out[:count]


def deliver_cpu(total: Tensor, var_total: Tensor, recv: Tensor, send: Tensor, link: np.ndarray, theta: Tensor,
                p: float, key: int, layout: Layout, variances: bool, src: Tensor | None = None) -> None:
    """Compressed delivery on the CPU, fused: for every link e (``recv[e]`` <- ``send[e]``, id
    ``link[e]``) the receiver's buffer gets its own model with the sender's elements at the link's
    sent positions: ``total[r] += theta[r]`` per link, plus ``theta_s - theta_r`` at the sent
    positions; with ``variances``, ``var_total[r]`` += the layer variances of that model (the
    sparse formula of :func:`receive_sparse`). ``src``: the senders' rows (a shard's received
    models; default theta). In place on ``total``/``var_total``; links of one receiver in order."""
    if recv.numel() == 0:
        return
    _, deliver = kernels()
    from vecgossip.core.jit import use_torch_threads
    use_torch_threads()                                                        # torch's budget
    r_np, s_np = recv.cpu().numpy(), send.cpu().numpy()
    order = np.argsort(r_np, kind="stable")
    groups, first, fill = np.unique(r_np[order], return_index=True, return_counts=True)
    starts = np.append(first, r_np.size).astype(np.int64)
    cdf, guide, inv_log = gap_table(p)
    n_layers = len(layout.weights)
    bounds = _bounds(layout, "cpu")[0].numpy().reshape(n_layers, 2)            # [start, stop) per weight
    s1 = np.zeros((r_np.size, n_layers) if variances else (1, 1))
    s2 = np.zeros_like(s1)
    th = theta.detach().numpy()
    deliver(total.numpy(), th, th if src is None else src.detach().numpy(), r_np, s_np, np.asarray(link, np.int64),
            starts, order, fill.astype(th.dtype), np.uint64(key), cdf, guide, inv_log, bounds, s1, s2, variances)
    if not variances:
        return
    rows = torch.from_numpy(groups)
    mean_r, var_r = link_moments(recv, rows, theta[rows], layout)
    add_link_variances(var_total, recv, torch.from_numpy(s1), torch.from_numpy(s2), mean_r, var_r, layout)
