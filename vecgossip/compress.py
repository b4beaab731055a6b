"""Weight compression (paper section III-C2) as sparse sends.

Along every link, each element of the sender's model arrives independently with probability p; the
receiver fills the unsent elements with its own current weights. Drawing one uniform per element
costs links x P random numbers per tick (17 M per tick at N = 50, k = 8, T_acq = 10 with LeNet).
Here the sent positions of a link are drawn as the arrivals of a Bernoulli(p) process: the gaps
between consecutive sent positions are i.i.d. Geometric(p) on {1, 2, ...}, which is exactly the
same distribution (every element sent independently with probability p, links independent) from
about p x P draws per link. The receiver's buffer then takes, per link, the receiver's own model
(one dense add per receiving node, counted once per link) plus the sparse differences at the sent
positions; the per-layer variances of the arrived models follow from the same sparse differences.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch

from .correction import layer_moments
from .stack import Layout

Tensor = torch.Tensor


def draws_per_link(size: int, p: float, margin: float = 7.0) -> int:
    """Gaps drawn per link: enough to pass ``size`` unless the link's count of sent elements
    exceeds its mean by ``margin`` standard deviations (then :func:`sent_positions` tops it up)."""
    return max(2, min(size + 1, int(math.ceil(size * p + margin * math.sqrt(size * p * (1 - p)) + 8))))


def uniforms(shape: tuple[int, int], generator: torch.Generator, rng: np.random.Generator | None,
             device: torch.device | str) -> Tensor:
    """U[0, 1) float32 (24-bit resolution, as torch.rand): from numpy's PCG64 on the CPU when ``rng``
    is given (~2x faster than torch's mt19937 here), else torch's generator on the device."""
    if rng is not None and torch.device(device).type == "cpu":
        return torch.from_numpy(rng.random(shape, dtype=np.float32))
    return torch.rand(shape, generator=generator, device=device)


def sent_positions(n_links: int, size: int, p: float, generator: torch.Generator,
                   device: torch.device | str = "cpu", margin: float = 7.0,
                   rng: np.random.Generator | None = None) -> Tensor:
    """The sent elements of ``n_links`` links of ``size`` elements, every element with probability
    ``p`` independently: (n_links, D) int64, each row increasing; entries >= ``size`` are padding
    (every row ends with at least one).

    Position j of a row is gap_1 + ... + gap_j - 1 with gap = 1 + floor(log(1 - u) / log(1 - p)),
    u ~ U[0, 1): Geometric(p) on {1, 2, ...}, the waiting times of a Bernoulli(p) process. A row
    whose D gaps have not passed ``size`` (probability ~1e-12 at the default margin) draws more."""
    if not 0 < p <= 1:
        raise ValueError(f"p must be in (0, 1], got {p}")
    if p == 1:
        return torch.arange(size + 1, device=device).expand(n_links, -1).contiguous()
    d = draws_per_link(size, p, margin)
    if n_links == 0:
        return torch.zeros(0, d, dtype=torch.long, device=device)
    dtype = torch.float32 if size < 2**24 else torch.float64    # exact integers up to ``size``
    blocks, last = [], None
    rows = torch.arange(n_links, device=device)
    while rows.numel():
        u = uniforms((rows.numel(), d), generator, rng, device).to(dtype)
        skip = u.neg_().log1p_().mul_(1.0 / math.log1p(-p)).floor_().clamp_max_(size)   # gap - 1
        pos = skip.cumsum_(1).to(torch.long).add_(torch.arange(d, device=device))
        if last is not None:
            pos += last.unsqueeze(1) + 1
        pos.clamp_max_(size)
        if last is None and bool(pos[:, -1].eq(size).all()):
            return pos                                                    # the usual case: one block
        block = torch.full((n_links, d), size, dtype=torch.long, device=device)
        block[rows] = pos
        blocks.append(block)
        last = pos[:, -1]
        more = last < size
        rows, last = rows[more], last[more]
    return blocks[0] if len(blocks) == 1 else torch.cat(blocks, 1)


@lru_cache(maxsize=16)
def _bounds(layout: Layout, device: str) -> tuple[Tensor, Tensor]:
    """(2L,) [start, stop] of every weight layer, and (L,) their sizes as float64."""
    w = layout.weights
    return (torch.tensor([[s.start, s.stop] for s in w], device=device).flatten(),
            torch.tensor([s.numel for s in w], dtype=torch.float64, device=device))


def fill_in(total: Tensor, recv: Tensor, theta: Tensor, layout: Layout,
            moments: bool = True) -> tuple[Tensor | None, Tensor | None]:
    """The dense part of compressed delivery: every link first brings the receiver's own model,
    ``total[r] += count_r theta[r]``; returns the per-link (E, L) weight mean and variance of the
    receiver's model, which :func:`receive_sparse` corrects for the sent elements (None, None
    without ``moments``)."""
    n = theta.shape[0]
    counts = torch.bincount(recv, minlength=n)
    rows = torch.nonzero(counts).flatten()
    own = theta[rows]                                                        # (R, P)
    total.index_add_(0, rows, own * counts[rows].unsqueeze(1).to(theta.dtype))
    if not moments:
        return None, None
    mean_r, var_r = layer_moments(own, layout)                               # (R, L)
    row_of = torch.zeros(n, dtype=torch.long, device=theta.device)
    row_of[rows] = torch.arange(rows.numel(), device=theta.device)
    return mean_r[row_of[recv]], var_r[row_of[recv]]


def receive_sparse(total: Tensor, var_total: Tensor, recv: Tensor, send: Tensor, theta: Tensor,
                   pos: Tensor, layout: Layout, mean_r: Tensor | None, var_r: Tensor | None,
                   src: Tensor | None = None) -> None:
    """The sparse part of compressed delivery along links ``send -> recv`` (E,) whose sent elements
    are the rows of ``pos`` (E, D) (:func:`sent_positions`), after :func:`fill_in` gave each link
    the receiver's model and its layer moments ``mean_r``, ``var_r`` (E, L): ``total[r] +=
    got_e - theta[r]`` and ``var_total[r] += layer_variance(got_e)``, where ``got_e = theta[r]``
    except ``theta[s]`` at the sent positions. ``mean_r=None``: the variances are not needed (no
    correction) and not computed.

    Variance of a link's model per weight layer, about the receiver's layer mean m (n elements):
    sum(got - m) = S1 = sum_sent d and sum((got - m)^2) = n var_r + sum_sent d (theta_s + theta_r)
    - 2 m S1, with d = theta_s - theta_r; the sums over a layer's sent elements are differences of
    running sums at the layer's bounds (positions are sorted), so only sent elements are touched.
    ``src``: the senders' models are its rows ``send`` (a shard's received rows), not theta's."""
    size = theta.shape[1]
    valid = pos < size
    safe = torch.where(valid, pos, 0)
    at_r_idx = safe + (recv * size).unsqueeze(1)
    at_r = torch.take(theta, at_r_idx)
    at_s = torch.take(theta if src is None else src, safe.add_((send * size).unsqueeze(1)))
    d = (at_s - at_r).mul_(valid)                                            # (E, D), 0 on padding
    total.view(-1).scatter_add_(0, at_r_idx.view(-1), d.view(-1))       # measured faster than index_add_
    if mean_r is None:
        return
    q = at_s.add_(at_r).mul_(d)
    bounds, numel = _bounds(layout, str(theta.device))
    b = torch.searchsorted(pos, bounds.expand(pos.shape[0], -1).contiguous())  # (E, 2L) <= D - 1
    sums = []
    for x in (d, q):
        ex = x.cumsum(1, dtype=torch.float64).sub_(x)                        # exclusive running sum
        at = ex.gather(1, b)
        sums.append(at[:, 1::2] - at[:, 0::2])                               # (E, L)
    s1, s2 = sums
    s2 -= 2 * mean_r.double() * s1
    var = (var_r.double() + s2 / numel - (s1 / numel) ** 2).clamp_min_(0)
    var_total.index_add_(0, recv, var.to(var_total.dtype))
