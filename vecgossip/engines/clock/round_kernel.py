"""One barrier round's event loop compiled as a whole (issue 56; numba, no numpy call per event):
the events of :func:`vecgossip.engines.clock.rounds.round_fates` (sends at compute ends, each
transfer's last byte, deliveries a latency later, nodes leaving) with the links shared by
:mod:`.maxmin`'s incremental exact max-min filling (``fair``) or one transfer per uplink at a
time in edge order (``fifo``), the time advancing from event to event. Events due at one instant
(within ``REL`` of it, relative) are one batch: the transfers whose last byte left, then
deliveries, then nodes leaving, then sends; the rates are shared once per batch. Each transfer's bytes
left are settled when its rate changes; its last byte's time sits in a heap (a stale entry is
skipped by its version). A batch re-shares only what it can change (:func:`.sharing.reshare`,
from the links of the transfers that started or stopped): the work grows with the messages, not
with the messages times those in flight."""
from __future__ import annotations

import numba as nb
import numpy as np

from vecgossip.engines.clock.maxmin import _pop, _push
from vecgossip.engines.clock.sharing import begin as begin_sharing
from vecgossip.engines.clock.sharing import links_of, reshare, stop, workspace

REL = 1e-12
IDLE, SENDING, FLYING, ARRIVED, DROPPED = 0, 1, 2, 3, 4


@nb.njit(cache=True)
def run_round(compute, leave, sender, receiver, size, lat, upc, dnc, fifo):
    """(end, done (n,), arrived (E,), gone (n,)) of one barrier round from time 0; edges sorted by
    sender (each sender's messages start in edge order). See :func:`~.rounds.round_fates`."""
    n, e = compute.size, sender.size
    up = sender.astype(np.int64)
    down = n + receiver.astype(np.int64)
    cap = np.concatenate((upc, dnc))
    st = np.zeros(e, np.int64)
    left = size.astype(np.float64).copy()
    rate = np.zeros(e)
    t_upd = np.zeros(e)
    carried = np.zeros(e, np.bool_)
    fresh = np.zeros(e, np.bool_)
    version = np.zeros(e, np.int64)
    ptr = np.zeros(n + 1, np.int64)                       # each sender's edges: ptr[i] .. ptr[i + 1]
    for k in range(e):
        ptr[sender[k] + 1] += 1
    for i in range(n):
        ptr[i + 1] += ptr[i]
    qpos = ptr[:-1].copy()                                # fifo: the first edge of i not yet sent
    pend_out = np.zeros(n, np.int64)
    pend_in = np.zeros(n, np.int64)
    for k in range(e):
        pend_out[sender[k]] += 1
        pend_in[receiver[k]] += 1
    done = np.minimum(compute, leave)
    gone = np.zeros(n, np.bool_)
    started = np.zeros(n, np.bool_)
    arrived = np.zeros(e, np.bool_)
    send_order = np.argsort(compute, kind="mergesort")
    leave_order = np.argsort(leave, kind="mergesort")
    si, li = 0, 0
    cap_h = 4 * e + 8
    ck, cj, cv = np.empty(cap_h), np.empty(cap_h, np.int64), np.empty(cap_h, np.int64)   # last bytes
    dk, dj, dv = np.empty(e + 1), np.empty(e + 1, np.int64), np.empty(e + 1, np.int64)   # deliveries
    cs, ds = 0, 0
    now = 0.0
    level0 = np.inf
    changed = False
    lptr, lidx = links_of(up, down, 2 * n)               # every link's transfers (CSR)
    ws = workspace(2 * n, e)
    seeds = np.empty(4 * e + 8, np.int64)                 # links of the transfers that started or stopped sharing
    ns = 0
    newly = np.empty(e, np.int64)                         # the transfers that started sharing in this batch
    nf = 0
    while True:
        while cs > 0 and cv[0] != version[cj[0]]:                          # stale last-byte entries
            _, _, _, cs = _pop(ck, cj, cv, cs)
        t = np.inf
        if cs > 0:
            t = ck[0]
        if ds > 0 and dk[0] < t:
            t = dk[0]
        if si < n and compute[send_order[si]] < t:
            t = compute[send_order[si]]
        if li < n and leave[leave_order[li]] < t:
            t = leave[leave_order[li]]
        if not np.isfinite(t):
            break
        if si >= n and cs == 0 and ds == 0:                                 # only leaves are left
            break
        now = max(now, t)
        tol = now + REL * max(abs(now), 1.0)
        while cs > 0 and ck[0] <= tol:                                      # last bytes leave
            _, k, v, cs = _pop(ck, cj, cv, cs)
            if v != version[k] or st[k] != SENDING:
                continue
            ns, level0 = stop(k, carried, rate, up, down, seeds, ns, level0)
            st[k], left[k] = FLYING, 0.0
            version[k] += 1
            ds = _push(dk, dj, dv, ds, now + lat[k], k, 0)
            changed = True
            if fifo:
                q = _next_in_queue(sender[k], ptr, qpos, st, carried)
                if q >= 0:
                    ns, nf = begin_sharing(q, carried, fresh, rate, up, down, seeds, ns, newly, nf)
        while ds > 0 and dk[0] <= tol:                                      # deliveries
            _, k, _, ds = _pop(dk, dj, dv, ds)
            if st[k] != FLYING:
                continue
            st[k] = ARRIVED
            arrived[k] = True
            pend_out[sender[k]] -= 1
            pend_in[receiver[k]] -= 1
            if now > done[receiver[k]]:
                done[receiver[k]] = now
        while li < n and leave[leave_order[li]] <= tol:                   # nodes leave
            i = leave_order[li]
            li += 1
            if gone[i] or (started[i] and pend_out[i] == 0 and pend_in[i] == 0):
                continue                                                    # finished its part: keeps it
            gone[i] = True
            for k in range(e):
                if (sender[k] == i or receiver[k] == i) and st[k] in (IDLE, SENDING, FLYING):
                    if st[k] == SENDING and carried[k] and not fresh[k]:
                        ns, level0 = stop(k, carried, rate, up, down, seeds, ns, level0)
                        changed = True
                    was_sending = st[k] == SENDING
                    st[k], carried[k], rate[k], fresh[k] = DROPPED, False, 0.0, False
                    version[k] += 1
                    pend_out[sender[k]] -= 1
                    pend_in[receiver[k]] -= 1
                    if fifo and was_sending:
                        q = _next_in_queue(sender[k], ptr, qpos, st, carried)
                        if q >= 0:
                            ns, nf = begin_sharing(q, carried, fresh, rate, up, down, seeds, ns, newly, nf)
        while si < n and compute[send_order[si]] <= tol:                  # sends
            i = send_order[si]
            si += 1
            if gone[i]:
                continue
            started[i] = True
            first = True
            for k in range(ptr[i], ptr[i + 1]):
                if st[k] != IDLE:
                    continue
                if gone[receiver[k]]:
                    st[k] = DROPPED
                    pend_out[i] -= 1
                    pend_in[receiver[k]] -= 1
                    continue
                st[k], t_upd[k] = SENDING, now
                if left[k] <= 0.0:                                          # zero bytes: sent at once
                    st[k] = FLYING
                    ds = _push(dk, dj, dv, ds, now + lat[k], k, 0)
                    continue
                if not fifo or first:
                    ns, nf = begin_sharing(k, carried, fresh, rate, up, down, seeds, ns, newly, nf)
                    changed = True
                    first = False
        if changed or nf:                                                   # share the links once
            cs = reshare(up, down, carried, rate, fresh, newly, nf, cap, lptr, lidx, seeds, ns, level0, ws, left,
                         t_upd, version, now, ck, cj, cv, cs)
            ns, nf = 0, 0
            level0, changed = np.inf, False
    end = 0.0
    for i in range(n):
        if not gone[i] and done[i] > end:
            end = done[i]
        if gone[i] and leave[i] > end:
            end = leave[i]
    return end, done, arrived, gone


@nb.njit(cache=True)
def _next_in_queue(i, ptr, qpos, st, carried):
    """fifo: sender i's next message waiting on its uplink (its index, -1: none); its edges are
    served in edge order."""
    while qpos[i] < ptr[i + 1] and st[qpos[i]] != SENDING:
        qpos[i] += 1
    k = qpos[i]
    if k < ptr[i + 1] and not carried[k]:
        return k
    return -1
