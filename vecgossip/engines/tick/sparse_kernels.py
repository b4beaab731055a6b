"""The fused CPU kernels of section III-C2's compressed sends (numba, compiled once and cached on
disk): each link's sent positions from a counter-based generator (SplitMix64 of (link, counter)
keyed by one draw per tick), the gaps between them Geometric(p) by table inversion
(:func:`vecgossip.engines.tick.sparse_send.gap_table`), delivered into the receivers' buffer sums
in one pass. Imported only when the CPU path first needs them (numba's JIT is not loaded before)."""
from __future__ import annotations

import math

import numpy as np

from vecgossip.core.jit import nb   # numba on its own thread pool (core/jit.py)

u64 = nb.uint64
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


@nb.njit(inline="always")
def draw(key, n):                      # SplitMix64 of the counter n: one 64-bit draw
    z = key + n * _GOLDEN
    z = (z ^ (z >> u64(30))) * _MIX1
    z = (z ^ (z >> u64(27))) * _MIX2
    return z ^ (z >> u64(31))


@nb.njit(inline="always")
def gap(key, n, cdf, guide, inv_log):  # (G - 1, draws used)
    x = draw(key, n)
    k = guide[x >> u64(56)]
    size = cdf.shape[0]
    while k < size and x >= cdf[k]:
        k += 1
    if k < size:
        return k, 1
    y = draw(key, n + u64(1))          # the tail: memoryless, K + a fresh Geometric by logarithm
    return size + int(math.log((float(y >> u64(11)) + 1.0) * 2.0**-53) * inv_log), 2


@nb.njit(cache=True)
def positions(key, link, size, cdf, guide, inv_log, out):
    """The sent positions of one link into ``out``; returns how many."""
    n, pos, count = u64(link) << u64(32), -1, 0
    while True:
        k, used = gap(key, n, cdf, guide, inv_log)
        n += u64(used)
        pos += 1 + k
        if pos >= size:
            return count
        out[count] = pos
        count += 1


@nb.njit(parallel=True, cache=True)
def deliver(total, theta, src, recv, send, link, starts, order, fill, key, cdf, guide, inv_log,
            bounds, s1, s2, moments):
    size, n_layers = theta.shape[1], bounds.shape[0]
    for g in nb.prange(starts.shape[0] - 1):
        r = recv[order[starts[g]]]
        f = fill[g]
        for j in range(size):           # every link first brings the receiver's own model
            total[r, j] += f * theta[r, j]
        for i in range(starts[g], starts[g + 1]):
            e = order[i]
            s = send[e]
            n, pos, lay = u64(link[e]) << u64(32), -1, 0
            while True:
                k, used = gap(key, n, cdf, guide, inv_log)
                n += u64(used)
                pos += 1 + k
                if pos >= size:
                    break
                ts, tr = src[s, pos], theta[r, pos]
                d = ts - tr
                total[r, pos] += d
                if moments:
                    while lay < n_layers and pos >= bounds[lay, 1]:
                        lay += 1
                    if lay < n_layers and pos >= bounds[lay, 0]:
                        s1[e, lay] += d
                        s2[e, lay] += float(d) * (float(ts) + float(tr))
