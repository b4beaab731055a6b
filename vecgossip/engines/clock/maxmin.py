"""Incremental exact max-min fair sharing (issue 56), compiled with numba: after flows start or
end, only the flows whose rates can change are shared anew, from the level where the change
begins to matter. SimGrid's fluid model (its linear max-min solver's selective update) is the
reference for re-solving only what a change touches; the level argument below is what makes it
exact here.

Progressive filling (tests/reference/fair_filling.py, from scratch) raises every unfrozen
flow's rate together; a link that fills freezes its flows at that level. Every flow uses two links
(its sender's uplink, its receiver's downlink). **Removing** flows whose rates were r_f changes
nothing below level L0 = min r_f: below it none of their links had filled (they were still
rising), so every link's fill trajectory, and every flow frozen below L0, is the same without
them. **Adding** flows changes nothing below the first level at which a link they use fills in
the new system: for such a link j with capacity C_j, the old flows' rates r_i on it and k new
flows, that level x solves sum_i min(r_i, x) + k x = C_j (:func:`entry_level`; below it the old
trajectory holds). So the new allocation keeps every rate below L0 (the minimum over the change)
and progressive filling resumes from L0 for the rest (:func:`refill`), links taken in order of
the level at which they fill (a heap): O((F + L) + affected x log L) a change instead of a
filling over everything. The allocation is unique, so this is the same allocation as filling from
scratch, to rounding (tests/test_clock_maxmin.py compares them on random starts, ends and aborts)."""
from __future__ import annotations

import numba as nb
import numpy as np


@nb.njit(cache=True)
def _push(hk, hj, hv, size, key, link, ver):
    i = size
    hk[i], hj[i], hv[i] = key, link, ver
    while i > 0:
        p = (i - 1) // 2
        if hk[p] <= hk[i]:
            break
        hk[p], hk[i] = hk[i], hk[p]
        hj[p], hj[i] = hj[i], hj[p]
        hv[p], hv[i] = hv[i], hv[p]
        i = p
    return size + 1


@nb.njit(cache=True)
def _pop(hk, hj, hv, size):
    key, link, ver = hk[0], hj[0], hv[0]
    size -= 1
    hk[0], hj[0], hv[0] = hk[size], hj[size], hv[size]
    i = 0
    while True:
        a, b, m = 2 * i + 1, 2 * i + 2, i
        if a < size and hk[a] < hk[m]:
            m = a
        if b < size and hk[b] < hk[m]:
            m = b
        if m == i:
            break
        hk[m], hk[i] = hk[i], hk[m]
        hj[m], hj[i] = hj[i], hj[m]
        hv[m], hv[i] = hv[i], hv[m]
        i = m
    return key, link, ver, size


@nb.njit(cache=True)
def refill(up, down, carried, rate, cap, level0):
    """Rates (in place) of the ``carried`` flows, flow k using links ``up[k]`` and ``down[k]``
    (indices into ``cap``, the links' capacities, inf allowed): a flow whose rate is below
    ``level0`` keeps it; the others (a new flow's rate is nan) are filled progressively from
    ``level0``. Flows not carried get rate 0."""
    f, nl = up.size, cap.size
    left = cap.copy()
    count = np.zeros(nl, np.int64)
    live = np.zeros(f, np.bool_)
    for k in range(f):
        if not carried[k]:
            rate[k] = 0.0
        elif rate[k] < level0:                       # frozen below the change (nan compares False)
            left[up[k]] -= rate[k]
            left[down[k]] -= rate[k]
        else:
            live[k] = True
            count[up[k]] += 1
            count[down[k]] += 1
    ptr = np.zeros(nl + 1, np.int64)                 # link -> its live flows (CSR)
    for j in range(nl):
        ptr[j + 1] = ptr[j] + count[j]
    fill = ptr[:-1].copy()
    idx = np.empty(ptr[nl], np.int64)
    for k in range(f):
        if live[k]:
            idx[fill[up[k]]] = k
            fill[up[k]] += 1
            idx[fill[down[k]]] = k
            fill[down[k]] += 1
    hk, hj, hv = np.empty(2 * f + nl), np.empty(2 * f + nl, np.int64), np.empty(2 * f + nl, np.int64)
    ver = np.zeros(nl, np.int64)
    size = 0
    for j in range(nl):
        if count[j] > 0 and np.isfinite(left[j]):
            size = _push(hk, hj, hv, size, max(left[j] / count[j], level0), j, 0)
    while size > 0:
        level, j, v, size = _pop(hk, hj, hv, size)
        if v != ver[j] or count[j] == 0:
            continue
        for p in range(ptr[j], ptr[j + 1]):
            k = idx[p]
            if not live[k]:
                continue
            live[k] = False
            rate[k] = level
            for other in (up[k], down[k]):
                count[other] -= 1
                left[other] -= level
                if other != j and count[other] > 0 and np.isfinite(left[other]):
                    ver[other] += 1
                    size = _push(hk, hj, hv, size, max(left[other] / count[other], level), other, ver[other])
    for k in range(f):
        if live[k]:
            rate[k] = np.inf                         # no finite link on its path
    return rate


@nb.njit(cache=True)
def entry_level(up, down, carried, rate, cap, fresh):
    """The level below which adding the ``fresh`` flows (carried, rate nan) changes no rate: the
    lowest level at which a link they use fills in the new system, sum_i min(r_i, x) + k x = C_j
    over that link's old flows' rates r_i and its k fresh flows (inf: no finite link)."""
    nl = cap.size
    k_new = np.zeros(nl, np.int64)
    for k in range(up.size):
        if fresh[k]:
            k_new[up[k]] += 1
            k_new[down[k]] += 1
    count = np.zeros(nl, np.int64)
    for k in range(up.size):
        if carried[k] and not fresh[k]:
            if k_new[up[k]] > 0:
                count[up[k]] += 1
            if k_new[down[k]] > 0:
                count[down[k]] += 1
    ptr = np.zeros(nl + 1, np.int64)
    for j in range(nl):
        ptr[j + 1] = ptr[j] + count[j]
    fill = ptr[:-1].copy()
    vals = np.empty(ptr[nl])
    for k in range(up.size):
        if carried[k] and not fresh[k]:
            for j in (up[k], down[k]):
                if k_new[j] > 0:
                    vals[fill[j]] = rate[k]
                    fill[j] += 1
    best = np.inf
    for j in range(nl):
        if k_new[j] == 0 or not np.isfinite(cap[j]):
            continue
        r = np.sort(vals[ptr[j]:ptr[j + 1]])
        m, s, x = r.size, 0.0, np.inf
        for i in range(m + 1):                        # x in [r[i-1], r[i]): s + (m - i + k) x = C
            x = (cap[j] - s) / (m - i + k_new[j])
            if i == m or x < r[i]:
                break
            s += r[i]
        if x < best:
            best = x
    return best
