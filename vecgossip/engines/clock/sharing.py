"""What the clock's three compiled event loops share (issue 56: :mod:`.round_kernel`,
:mod:`.flow_kernel`, :mod:`.barrier_kernel`): each link's transfers, a transfer starting or
stopping to share the links (its two links seeded for :func:`.maxmin.share_local`), the links
shared anew once an instant's events are in (the transfers whose rates moved have their bytes
settled and their last bytes pushed again, a stale heap entry being skipped by its version), and
FIFO uplinks' queues."""
from __future__ import annotations

import numba as nb
import numpy as np

from vecgossip.engines.clock.maxmin import TOL, _pop, _push, share_local


@nb.njit(cache=True)
def links_of(up, down, nl):
    """(ptr, idx): the transfers using each link (CSR; a transfer is on its up and its down link)."""
    ptr = np.zeros(nl + 1, np.int64)
    for k in range(up.size):
        ptr[up[k] + 1] += 1
        ptr[down[k] + 1] += 1
    for j in range(nl):
        ptr[j + 1] += ptr[j]
    fill = ptr[:-1].copy()
    idx = np.empty(2 * up.size, np.int64)
    for k in range(up.size):
        idx[fill[up[k]]] = k
        fill[up[k]] += 1
        idx[fill[down[k]]] = k
        fill[down[k]] += 1
    return ptr, idx


@nb.njit(cache=True)
def workspace(nl, f):
    """:func:`.maxmin.share_local`'s arrays for ``nl`` links and ``f`` transfers."""
    h = 4 * f + 2 * nl + 8
    return (np.zeros(nl, np.bool_), np.zeros(nl), np.zeros(nl, np.int64), np.zeros(nl, np.int64),
            np.empty(nl, np.int64), np.zeros(f, np.bool_), np.empty(f, np.int64), np.empty(f), np.empty(h),
            np.empty(h, np.int64), np.empty(h, np.int64))


@nb.njit(cache=True)
def begin(k, carried, fresh, rate, up, down, seeds, ns, newly, nf):
    """Transfer k starts sharing the links (its rate found at the next sharing). Returns (ns, nf)."""
    carried[k], fresh[k], rate[k] = True, True, np.nan
    seeds[ns], seeds[ns + 1] = up[k], down[k]
    newly[nf] = k
    return ns + 2, nf + 1


@nb.njit(cache=True)
def stop(k, carried, rate, up, down, seeds, ns, level0):
    """Transfer k stops sharing (its last byte left, or it was cut). Returns (ns, level0)."""
    level0 = min(level0, rate[k])
    carried[k], rate[k] = False, 0.0
    seeds[ns], seeds[ns + 1] = up[k], down[k]
    return ns + 2, level0


@nb.njit(cache=True)
def due(k, now, left, rate):
    """When transfer k's last byte leaves at its rate from ``now`` (inf: never)."""
    if np.isinf(rate[k]):
        return now
    if rate[k] > 0:
        return now + left[k] / rate[k]
    return np.inf


@nb.njit(cache=True)
def rebuild(ck, cj, cv, carried, t_upd, left, rate, version):
    """The last-byte heap anew from the transfers being carried (its stale entries dropped)."""
    cs = 0
    for k in range(carried.size):
        if carried[k] and rate[k] > 0:
            cs = _push(ck, cj, cv, cs, due(k, t_upd[k], left, rate), k, version[k])
    return cs


@nb.njit(cache=True)
def reshare(up, down, carried, rate, fresh, newly, nf, cap, lptr, lidx, seeds, ns, level0, ws, left, t_upd,
            version, now, ck, cj, cv, cs):
    """The links shared anew after an instant (:func:`.maxmin.share_local` from the ``seeds[:ns]``
    links; from level 0 when a transfer started); each transfer whose rate moved has its bytes
    settled at ``now`` and its last byte pushed on the heap (``ck``, ``cj``, ``cv``; rebuilt when
    full of stale entries). Returns the heap's size; the fresh ones are fresh no more."""
    dirty, fsum, lcnt, lver, dl, assigned, asg, was, hk, hj, hv = ws
    m = share_local(up, down, carried, rate, fresh, cap, lptr, lidx, seeds, ns, 0.0 if nf else level0, dirty, fsum,
                    lcnt, lver, dl, assigned, asg, was, hk, hj, hv, TOL)
    for a in range(m):
        k = asg[a]
        if not fresh[k] and rate[k] == was[a]:
            continue
        if not fresh[k]:
            left[k] = 0.0 if np.isinf(was[a]) else max(left[k] - was[a] * (now - t_upd[k]), 0.0)
        t_upd[k] = now
        version[k] += 1
        t = due(k, now, left, rate)
        if np.isfinite(t):
            if cs + 1 >= ck.size:
                cs = rebuild(ck, cj, cv, carried, t_upd, left, rate, version)
            cs = _push(ck, cj, cv, cs, t, k, version[k])
    for a in range(nf):
        fresh[newly[a]] = False
    return cs


@nb.njit(cache=True)
def busy(s, sender, carried):
    """fifo: whether sender s's uplink carries a transfer now."""
    for k in range(sender.size):
        if carried[k] and sender[k] == s:
            return True
    return False


@nb.njit(cache=True)
def next_in_queue(s, sender, seq, started, sent_at, carried):
    """fifo: sender s's oldest transfer waiting on its uplink (-1: none)."""
    best = -1
    for k in range(sender.size):
        if sender[k] == s and started[k] and np.isnan(sent_at[k]) and not carried[k]:
            if best < 0 or seq[k] < seq[best]:
                best = k
    return best


@nb.njit(cache=True)
def last_bytes(now, tol, ck, cj, cv, cs, dk, dj, dv, ds, version, carried, rate, left, sent_at, latency, seq, sender,
               started, fresh, up, down, seeds, ns, newly, nf, level0, fifo):
    """The transfers whose last byte leaves by ``tol`` (the heap ``ck``, ``cj``, ``cv``): they
    stop sharing, count as sent at ``now`` and go on the delivery heap (``dk``, ``dj``, ``dv``) a
    latency later; under fifo each one's sender starts its next waiting transfer. Returns (cs, ds,
    ns, nf, level0, whether any left)."""
    moved = False
    while cs > 0 and ck[0] <= tol:
        _, k, v, cs = _pop(ck, cj, cv, cs)
        if v != version[k] or not carried[k]:
            continue
        ns, level0 = stop(k, carried, rate, up, down, seeds, ns, level0)
        left[k], sent_at[k] = 0.0, now
        moved = True
        ds = _push(dk, dj, dv, ds, now + latency[k], k, seq[k])
        if fifo:
            q = next_in_queue(sender[k], sender, seq, started, sent_at, carried)
            if q >= 0:
                ns, nf = begin(q, carried, fresh, rate, up, down, seeds, ns, newly, nf)
    return cs, ds, ns, nf, level0, moved


@nb.njit(cache=True)
def prepare(sender, receiver, n, seeds_in):
    """A loop's sharing state over the transfers ``sender`` -> ``receiver`` of ``n`` nodes: (up,
    down: each transfer's links; lptr, lidx: each link's transfers; the workspace; seeds with
    ``seeds_in`` first, their count; fresh; newly, their count)."""
    f = sender.size
    up = sender.astype(np.int64)
    down = n + receiver.astype(np.int64)
    lptr, lidx = links_of(up, down, 2 * n)
    seeds = np.empty(4 * f + seeds_in.size + 8, np.int64)
    seeds[:seeds_in.size] = seeds_in
    return (up, down, lptr, lidx, workspace(2 * n, f), seeds, seeds_in.size, np.zeros(f, np.bool_),
            np.empty(f, np.int64), 0)


@nb.njit(cache=True)
def earliest(ck, cs, dk, ds, xk, xs):
    """The earliest time at the heads of three heaps (inf: all empty)."""
    t = np.inf
    if cs > 0:
        t = ck[0]
    if ds > 0 and dk[0] < t:
        t = dk[0]
    if xs > 0 and xk[0] < t:
        t = xk[0]
    return t


@nb.njit(cache=True)
def start(k, now, left, sent_at, latency, seq, sender, carried, fresh, rate, up, down, seeds, ns, newly, nf, dk, dj,
          dv, ds, fifo):
    """Transfer k starts at ``now``: zero bytes are sent at once (on the delivery heap a latency
    later); otherwise it shares the links, unless a FIFO uplink is busy (it waits in the queue).
    Returns (ds, ns, nf, whether the sharing changed)."""
    if left[k] <= 0.0:
        sent_at[k] = now
        return _push(dk, dj, dv, ds, now + latency[k], k, seq[k]), ns, nf, False
    if fifo and busy(sender[k], sender, carried):
        return ds, ns, nf, False
    ns, nf = begin(k, carried, fresh, rate, up, down, seeds, ns, newly, nf)
    return ds, ns, nf, True
