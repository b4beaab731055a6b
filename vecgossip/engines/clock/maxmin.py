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
scratch, to rounding (tests/test_clock_maxmin.py compares them on random starts, ends and aborts).

:func:`refill` still touches every flow above L0; in a connected round nearly all flows run at
similar rates, so each change cost O(flows) and a round O(messages^2). :func:`share_local` goes
further: above L0 only the links whose fill can differ are simulated (a link's fill can differ only
once a flow through it gets another rate, or rises past its old one); every other link fills at
its old level, so its flows keep their rates without being visited. A rate tied with L0 to
rounding (``TOL``) rises again rather than standing (an earlier sharing's last bit must not freeze a
flow that was filling with the one that left)."""
from __future__ import annotations

import numba as nb
import numpy as np

TOL = 1e-11         # a rate within this fraction of another is tied with it (rounding of earlier sharings)


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
        elif rate[k] < level0 * (1.0 - TOL):         # frozen below the change (nan compares False; a rate
                                                     # tied with level0 to rounding rises again)
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



class Workspace:
    """:func:`share_local`'s arrays for ``links`` links and ``flows`` flows, made once per run
    (each call resets what it touched)."""

    def __init__(self, links: int, flows: int) -> None:
        self.dirty = np.zeros(links, np.bool_)
        self.fsum = np.zeros(links)
        self.lcnt = np.zeros(links, np.int64)
        self.lver = np.zeros(links, np.int64)
        self.dl = np.empty(links, np.int64)
        self.assigned = np.zeros(flows, np.bool_)
        self.asg = np.empty(flows, np.int64)
        self.was = np.empty(flows)
        h = 4 * flows + 2 * links + 8
        self.hk, self.hj, self.hv = np.empty(h), np.empty(h, np.int64), np.empty(h, np.int64)

    def arrays(self):
        return (self.dirty, self.fsum, self.lcnt, self.lver, self.dl, self.assigned, self.asg, self.was,
                self.hk, self.hj, self.hv)


@nb.njit(cache=True)
def _assign(k, r, rate, assigned, asg, was, na):
    assigned[k] = True
    asg[na], was[na] = k, rate[k]
    rate[k] = r
    return na + 1


@nb.njit(cache=True)
def _moved(a, b, tol):
    """Whether rate a differs from rate b by more than ``tol`` (relative; an infinite one only
    equals itself)."""
    if a == b:
        return False
    if not (np.isfinite(a) and np.isfinite(b)):
        return True
    return abs(a - b) > tol * max(a, b)


@nb.njit(cache=True)
def _project(j, level, cap, fsum, lcnt, lver, hk, hj, hv, size):
    """Push dirty link j's fill level (its frozen flows' rates and live count as they stand)."""
    if lcnt[j] > 0 and np.isfinite(cap[j]):
        lver[j] += 1
        size = _push(hk, hj, hv, size, max((cap[j] - fsum[j]) / lcnt[j], level), j, lver[j])
    return size


@nb.njit(cache=True)
def _mark(j, y, up, down, carried, fresh, rate, cap, lptr, lidx, dirty, fsum, lcnt, lver, dl, nd,
          assigned, asg, was, na, hk, hj, hv, size, tol):
    """Link j's fill from level y on is re-simulated (it is dirty): its flows with rates known by
    y are frozen there, the others live (each with an event at its old rate when its other link
    is clean)."""
    nl = cap.size
    dirty[j] = True
    dl[nd] = j
    nd += 1
    s, c = 0.0, 0
    for p in range(lptr[j], lptr[j + 1]):
        k = lidx[p]
        if not carried[k]:
            continue
        if not assigned[k] and not fresh[k] and rate[k] < y * (1.0 - tol):   # frozen below y at its old rate
            na = _assign(k, rate[k], rate, assigned, asg, was, na)
        if assigned[k]:
            s += rate[k]
            continue
        c += 1
        o = down[k] if up[k] == j else up[k]
        if not dirty[o] and not fresh[k] and np.isfinite(rate[k]):
            size = _push(hk, hj, hv, size, rate[k], nl + k, 0)
    fsum[j], lcnt[j] = s, c
    size = _project(j, y, cap, fsum, lcnt, lver, hk, hj, hv, size)
    return nd, na, size


@nb.njit(cache=True)
def _froze_at(o, r, carried, rate, cap, lptr, lidx, tol):
    """Whether clean link o filled at level r before the change (saturated, its largest rate r):
    then it freezes its flows still rising at r again."""
    if not np.isfinite(cap[o]):
        return False
    s, top = 0.0, 0.0
    for p in range(lptr[o], lptr[o + 1]):
        k = lidx[p]
        if carried[k]:
            s += rate[k]
            top = max(top, rate[k])
    return s >= cap[o] * (1.0 - tol) and abs(top - r) <= tol * r


@nb.njit(cache=True)
def share_local(up, down, carried, rate, fresh, cap, lptr, lidx, seeds, nseed, level0,
                dirty, fsum, lcnt, lver, dl, assigned, asg, was, hk, hj, hv, tol):
    """Max-min fair rates after a change, touching only the flows whose rates can move (issue 56,
    item 1: near-linear in messages). In: ``rate`` the old allocation of the flows carried before
    (a ``fresh`` flow's rate is ignored), ``carried`` the flows sharing now, ``seeds[:nseed]`` the
    links of every flow that started or stopped sharing, ``level0`` the level below which no rate
    can change (the smallest rate of a flow that stopped; 0 when a flow started: see the module's
    docstring). ``lptr``/``lidx``: every link's flows (CSR over all flows; those not carried are
    skipped). Returns the number of flows whose rates were (re)set, ``asg[:m]``, with their rates
    before in ``was[:m]``; ``rate`` updated in place. The workspace arrays come from
    :class:`Workspace` and are left clean.

    Progressive filling re-simulated lazily: a link is **dirty** once its fill can differ from
    the old one (a seed, or a flow through it got a rate other than its old one, or kept rising
    past it); a dirty link's fill level is (C - frozen rates) / live flows, in a heap by level. A
    **clean** link fills at the same level as before (the flows through it so far have their old
    rates), so it is never computed: a flow rising through a dirty link and a clean one gets an
    event at its old rate r; then, if the clean link filled at r before (saturated, its largest
    rate r), the flow freezes at r again; otherwise it rises past its old rate and its clean link
    becomes dirty from r. A dirty link that fills gives its live flows its level; a flow whose rate
    moves (by more than ``tol``, relative) makes its other link dirty from that level. Every link
    is either simulated or follows its old trajectory, so the result is progressive filling's,
    the unique max-min allocation (tests/test_clock_maxmin.py: against filling from scratch); the
    work is the dirty links' flows, log-factor, instead of every flow above ``level0``."""
    nl = cap.size
    nd, na, size = 0, 0, 0
    for s in range(nseed):
        if not dirty[seeds[s]]:
            nd, na, size = _mark(seeds[s], level0, up, down, carried, fresh, rate, cap, lptr, lidx, dirty, fsum,
                                 lcnt, lver, dl, nd, assigned, asg, was, na, hk, hj, hv, size, tol)
    while size > 0:
        key, ident, v, size = _pop(hk, hj, hv, size)
        if ident < nl:                                                 # dirty link ident fills at key
            j = ident
            if v != lver[j] or lcnt[j] == 0:
                continue
            lcnt[j] = 0
            for p in range(lptr[j], lptr[j + 1]):
                k = lidx[p]
                if not carried[k] or assigned[k]:
                    continue
                old, new = rate[k], fresh[k]
                na = _assign(k, key, rate, assigned, asg, was, na)
                o = down[k] if up[k] == j else up[k]
                if dirty[o]:
                    lcnt[o] -= 1
                    fsum[o] += key
                    size = _project(o, key, cap, fsum, lcnt, lver, hk, hj, hv, size)
                elif new or _moved(key, old, tol):
                    nd, na, size = _mark(o, key, up, down, carried, fresh, rate, cap, lptr, lidx, dirty, fsum,
                                         lcnt, lver, dl, nd, assigned, asg, was, na, hk, hj, hv, size, tol)
        else:                                                          # flow ident - nl reaches its old rate
            k = ident - nl
            if assigned[k]:
                continue
            a, b = up[k], down[k]
            if dirty[a] and dirty[b]:
                continue
            j, o = (a, b) if dirty[a] else (b, a)
            if _froze_at(o, key, carried, rate, cap, lptr, lidx, tol):
                na = _assign(k, rate[k], rate, assigned, asg, was, na)
                lcnt[j] -= 1
                fsum[j] += rate[k]
                size = _project(j, key, cap, fsum, lcnt, lver, hk, hj, hv, size)
            else:
                nd, na, size = _mark(o, key, up, down, carried, fresh, rate, cap, lptr, lidx, dirty, fsum,
                                     lcnt, lver, dl, nd, assigned, asg, was, na, hk, hj, hv, size, tol)
    for d in range(nd):                                                # no finite link left to fill
        j = dl[d]
        for p in range(lptr[j], lptr[j + 1]):
            k = lidx[p]
            if carried[k] and not assigned[k]:
                na = _assign(k, np.inf, rate, assigned, asg, was, na)
    for d in range(nd):
        j = dl[d]
        dirty[j], fsum[j], lcnt[j] = False, 0.0, 0
    for i in range(na):
        assigned[asg[i]] = False
    return na
