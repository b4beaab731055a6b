"""Weight compression (paper section III-C2) on the GPU's path: every link of a tick in ONE pass.

Along a link e (sender s -> receiver r), each element of the sender's model arrives independently
with probability p and the receiver fills the unsent elements with its own weights:
``got_e = where(mask_e, theta_s, theta_r)``; the receiver's buffer sum takes ``got_e`` and, for
variance correction, the per-layer variance of ``got_e``. On the CPU a numba kernel draws only the
sent positions (:mod:`.sparse_send`); on a GPU random numbers are cheap and launches are not, so
here every element draws its own uniform and the whole tick's delivery is one kernel
(:mod:`.masked_kernels`) over (receiver, block of a parameter) programs, each walking the
receiver's links in order. Launches per tick do not grow with the degree or with the number of
links, and nothing of size (links, P) is ever allocated.

The mask of element j of link e comes from Philox4x32-10 (Salmon et al. 2011, the generator of
cuRAND and of torch's CUDA streams), counter-based: counter (j // 4 within its parameter, e's
global link id, the parameter's index, 0), key = the tick's 64-bit key (one draw of the engine's
numpy stream per tick, as on the CPU path), word j % 4; the element is sent when that word is below
``floor(p 2^32)`` (p in steps of 2^-32). So a link's mask depends only on (key, link id), never on
the chunk, the shard, the device's memory or the order links are processed in; a rank of a
sharded run draws exactly what one process draws for its links. :func:`deliver_reference` is
the same computation in torch ops (registered as ONE op, ``vecgossip::deliver_masked``, so that a
launch count sees one pass): it runs where Triton does not (a CPU with the GPU's paths forced,
CUDA without Triton) and is the kernel's twin in the tests."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from vecgossip.core.device import upload
from vecgossip.core.state import Layout

Tensor = torch.Tensor

BLOCK = 1024                       # elements per program (a multiple of 4: one Philox call per 4)
MASK32 = 0xFFFFFFFF
PHILOX_M = (0xD2511F53, 0xCD9E8D57)
PHILOX_W = (0x9E3779B9, 0xBB67AE85)
ROUNDS = 10
REFERENCE_BUDGET = 1 << 24         # elements of a link chunk in the torch twin (bounds its workspace)


def threshold(p: float) -> int:
    """The bound below which a 32-bit word sends its element: floor(p 2^32), so P(sent) = p up to
    2^-32 (p = 1: 2^32, every element)."""
    if not 0.0 < p <= 1.0:
        raise ValueError(f"p must be in (0, 1], got {p}")
    return int(p * 2.0**32)


def _mulhilo(m: int, x: Tensor) -> tuple[Tensor, Tensor]:
    """(hi, lo) 32-bit halves of m * x for a constant m and x (int64 holding uint32), exact in
    int64 through 16-bit halves (no product passes 2^50)."""
    mh, ml = m >> 16, m & 0xFFFF
    xh, xl = x >> 16, x & 0xFFFF
    low = ml * xl                                              # < 2^32
    mid = mh * xl + ml * xh                                    # < 2^33
    lo_full = low + ((mid & 0xFFFF) << 16)                     # < 2^33
    hi = mh * xh + (mid >> 16) + (lo_full >> 32)
    return hi & MASK32, lo_full & MASK32


def philox4x32(c0: Tensor, c1: Tensor, c2: Tensor, c3: Tensor, key: int,
               rounds: int = ROUNDS) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Philox4x32 (10 rounds) of the counters (int64 tensors holding uint32, broadcast together)
    under the 64-bit ``key`` (its low word k0, high word k1): the four output words, int64 in
    [0, 2^32). Random123's known-answer vectors hold (tests/test_masked_send.py)."""
    k0, k1 = key & MASK32, (key >> 32) & MASK32
    c0, c1, c2, c3 = torch.broadcast_tensors(c0, c1, c2, c3)
    for _ in range(rounds):
        hi0, lo0 = _mulhilo(PHILOX_M[0], c0)
        hi1, lo1 = _mulhilo(PHILOX_M[1], c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0, k1 = (k0 + PHILOX_W[0]) & MASK32, (k1 + PHILOX_W[1]) & MASK32
    return c0, c1, c2, c3


@dataclass(frozen=True)
class Blocks:
    """The flat parameter vector cut into programs' blocks, none across two parameters (or into
    the trailing BatchNorm statistics): ``start``/``stop`` (NB,) columns, ``segment`` (NB,) the
    parameter's index, ``rel`` (NB,) the block's first column within its parameter. Philox
    groups (4 columns from a parameter's start): ``group_rel`` (G,) counter c0, ``group_seg`` (G,)
    counter c2; per column (P,): ``pick`` = 4 x its group + its word, ``column_block``;
    ``onehot`` (NB, L) float64: which weight layer each block belongs to (0 rows for biases and
    statistics); ``numel`` (L,) float64: each weight layer's size."""

    start: Tensor
    stop: Tensor
    segment: Tensor
    rel: Tensor
    group_rel: Tensor
    group_seg: Tensor
    pick: Tensor
    column_block: Tensor
    onehot: Tensor
    numel: Tensor

    @property
    def count(self) -> int:
        return int(self.start.numel())


@lru_cache(maxsize=16)
def blocks_of(layout: Layout, device: torch.device) -> Blocks:
    """The :class:`Blocks` of ``layout`` on ``device`` (made once per layout and device)."""
    segs = [(s.start, s.stop) for s in layout.specs]
    if layout.size > layout.params_size:
        segs.append((layout.params_size, layout.size))
    weight_of = {(w.start, w.stop): i for i, w in enumerate(layout.weights)}
    start, stop, seg, rel, layer = [], [], [], [], []
    for k, (a, b) in enumerate(segs):
        for lo in range(a, b, BLOCK):
            start.append(lo)
            stop.append(min(lo + BLOCK, b))
            seg.append(k)
            rel.append(lo - a)
            layer.append(weight_of.get((a, b), -1))
    groups = [-(-(b - a) // 4) for a, b in segs]                  # Philox calls per parameter
    first = np.concatenate([[0], np.cumsum(groups)[:-1]])
    g_rel = np.concatenate([np.arange(g) for g in groups])
    g_seg = np.repeat(np.arange(len(segs)), groups)
    col_rel = np.concatenate([np.arange(b - a) for a, b in segs])
    col_first = np.repeat(first, [b - a for a, b in segs])
    pick = 4 * (col_first + col_rel // 4) + col_rel % 4
    col_block = np.repeat(np.arange(len(start)), np.asarray(stop) - np.asarray(start))
    onehot = np.zeros((len(start), len(layout.weights)))
    has = np.asarray(layer) >= 0
    onehot[np.flatnonzero(has), np.asarray(layer)[has]] = 1.0
    t = lambda a, dt=torch.int64: torch.as_tensor(np.asarray(a)).to(device, dt)   # noqa: E731
    return Blocks(t(start), t(stop), t(seg), t(rel), t(g_rel), t(g_seg), t(pick), t(col_block),
                  t(onehot, torch.float64), t([w.numel for w in layout.weights], torch.float64))


@dataclass
class SendPlan:
    """One tick's links grouped by receiver, what the kernel walks: ``rows`` (R,) the receivers,
    ``indptr`` (R + 1,) their link ranges, per link (E,) in that order: ``link`` (global link id:
    the one-process order of the tick's links), ``send`` (the sender's row of the source),
    ``recv`` (the receiver's row); ``per_recv`` (n,) links into each row, on the host and (in the
    state's dtype) on the device."""

    rows: Tensor
    indptr: Tensor
    link: Tensor
    send: Tensor
    recv: Tensor
    per_recv: np.ndarray
    per_recv_dev: Tensor

    @property
    def links(self) -> int:
        return int(self.link.numel())


def plan_links(recv: np.ndarray, send: np.ndarray, link: np.ndarray, n: int, device: torch.device,
               dtype: torch.dtype) -> SendPlan:
    """The :class:`SendPlan` of links ``send -> recv`` (E,) with global ids ``link`` into ``n``
    rows, built on the host (no device sync) and uploaded without blocking. A receiver's links
    keep their given order (the order its buffer adds them in)."""
    order = np.argsort(recv, kind="stable")
    r_sorted = recv[order]
    rows, first = np.unique(r_sorted, return_index=True)
    indptr = np.append(first, r_sorted.size).astype(np.int64)
    per_recv = np.bincount(recv, minlength=n).astype(np.float64)
    up = lambda a, dt=torch.int64: upload(np.ascontiguousarray(a), device, dt)   # noqa: E731
    return SendPlan(up(rows), up(indptr), up(link[order]), up(send[order]), up(r_sorted), per_recv,
                    up(per_recv, dtype))


@torch.library.custom_op("vecgossip::deliver_masked", mutates_args=("total", "part1", "part2"))
def deliver_reference(total: Tensor, theta: Tensor, src: Tensor, part1: Tensor, part2: Tensor, recv: Tensor,
                      send: Tensor, link: Tensor, group_rel: Tensor, group_seg: Tensor, pick: Tensor,
                      column_block: Tensor, key: int, bound: int, moments: bool) -> None:
    """The kernel's pass in torch ops, links in plan order (``recv`` sorted, a receiver's links
    in order): ``total[recv[e]] += got_e`` one link after another (so float sums are added in the
    kernel's order), and with ``moments`` per (link, block) the sums of got_e and got_e^2 into
    ``part1``/``part2`` (E, NB). One Philox call per group of 4 columns; chunks of links bound the
    workspace (the masks do not depend on them)."""
    e_all, size = send.numel(), theta.shape[1]
    step = max(1, REFERENCE_BUDGET // max(1, size))
    c0, c2 = group_rel.unsqueeze(0), group_seg.unsqueeze(0)          # (1, G)
    for lo in range(0, e_all, step):
        hi = min(lo + step, e_all)
        words = philox4x32(c0, link[lo:hi].unsqueeze(1), c2, torch.zeros_like(c0), key)   # 4 x (E_c, G)
        chosen = torch.stack(words, 2).flatten(1).index_select(1, pick)                  # (E_c, P)
        keep = chosen < bound
        got = torch.where(keep, src[send[lo:hi]], theta[recv[lo:hi]])
        total.index_add_(0, recv[lo:hi], got)          # on the CPU in index order: the kernel's sums
        if moments:
            part1[lo:hi] = torch.zeros_like(part1[lo:hi]).index_add_(1, column_block, got)
            part2[lo:hi] = torch.zeros_like(part2[lo:hi]).index_add_(1, column_block, got * got)


@lru_cache(maxsize=1)
def _triton() -> bool:
    import importlib.util
    return importlib.util.find_spec("triton") is not None


def deliver(total: Tensor, var_total: Tensor, count: Tensor, plan: SendPlan, theta: Tensor, p: float, key: int,
            layout: Layout, variances: bool, src: Tensor | None = None, kernel: str = "auto") -> None:
    """Compressed delivery of ``plan``'s links (p < 1) into the buffer sums ``total`` (n, P),
    ``count`` (n,) and, with ``variances``, ``var_total`` (n, L): one kernel launch (Triton on
    CUDA) or its torch twin, then a handful of ops over (links, layers). ``src``: the senders'
    rows (a shard's received models; default ``theta``). ``kernel``: auto | triton | torch."""
    if plan.links == 0:
        return
    b = blocks_of(layout, theta.device)
    src = theta if src is None else src
    shape = (plan.links, b.count) if variances else (1, 1)
    part1 = theta.new_zeros(shape)                     # the state's dtype: float64 twins keep their precision
    part2 = theta.new_zeros(shape)
    bound = threshold(p)
    if kernel == "triton" or (kernel == "auto" and theta.is_cuda and _triton()):
        from vecgossip.engines.tick.masked_kernels import deliver_masked
        deliver_masked(total, theta, src, part1, part2, plan, b, key, bound, variances, BLOCK)
    else:
        torch.ops.vecgossip.deliver_masked(total, theta, src, part1, part2, plan.recv, plan.send, plan.link,
                                           b.group_rel, b.group_seg, b.pick, b.column_block, key, bound, variances)
    count += plan.per_recv_dev
    if not variances:
        return
    s1 = part1.double() @ b.onehot / b.numel                         # (E, L) means
    s2 = part2.double() @ b.onehot / b.numel
    var = (s2 - s1 * s1).clamp_min_(0)
    var_total.index_add_(0, plan.recv, var.to(var_total.dtype))
