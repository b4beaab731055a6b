"""The transfers' events up to a time, compiled as a whole (issue 56; numba, no numpy call per
event): :meth:`vecgossip.engines.clock.transfers.Transfers.run_until` hands its arrays here. Three
event sources in heaps keyed by time: transfers starting (scheduled ahead,
:meth:`~vecgossip.engines.clock.transfers.Transfers.schedule`), last bytes leaving, deliveries a
latency after the last byte. Events at one instant (within ``rel`` of it) are one batch, in this
order: last bytes, deliveries, starts; then the links are shared once, locally
(:func:`.maxmin.share_local`: only the links the batch's changes reach). A transfer's bytes are
settled when its rate changes, so an event costs the transfers whose rates move, not all those in
flight. The deliveries come back in order (time, then start order): the same events and times as
the step-by-step methods (``advance``, ``next_event``, ``delivered``) it replaces on the hot path,
to rounding (tests/test_clock_tick.py, tests/test_clock_barrier.py)."""
from __future__ import annotations

import numba as nb
import numpy as np

from vecgossip.engines.clock.maxmin import TOL, _pop, _push, share_local
from vecgossip.engines.clock.round_kernel import _links


@nb.njit(cache=True)
def _carried(sender, seq, sending, fifo, n):
    out = sending.copy()
    if fifo:
        first = np.full(n, -1, np.int64)
        for k in range(sender.size):
            if sending[k]:
                s = sender[k]
                if first[s] < 0 or seq[k] < seq[first[s]]:
                    first[s] = k
        for k in range(sender.size):
            out[k] = False
        for s in range(n):
            if first[s] >= 0:
                out[first[s]] = True
    return out


@nb.njit(cache=True)
def _due(k, now, left, rate):
    if np.isinf(rate[k]):
        return now
    if rate[k] > 0:
        return now + left[k] / rate[k]
    return np.inf


@nb.njit(cache=True)
def reshare(up, down, carried, rate, fresh, cap, lptr, lidx, seeds, ns, level0, dirty, fsum, lcnt, lver, dl,
            assigned, asg, was, hk, hj, hv, left, t_upd, version, now, ck, cj, cv, cs):
    """The links shared anew after a batch (:func:`.maxmin.share_local` from the ``seeds`` links);
    each transfer whose rate moved has its bytes settled at ``now`` and its last byte pushed on the
    heap (``ck``, ``cj``, ``cv``; rebuilt when full of stale entries). Returns the heap's size."""
    mm = share_local(up, down, carried, rate, fresh, cap, lptr, lidx, seeds, ns, level0, dirty, fsum, lcnt, lver,
                     dl, assigned, asg, was, hk, hj, hv, TOL)
    for a in range(mm):
        k = asg[a]
        if not fresh[k] and rate[k] == was[a]:
            continue
        if not fresh[k]:
            left[k] = 0.0 if np.isinf(was[a]) else max(left[k] - was[a] * (now - t_upd[k]), 0.0)
        t_upd[k] = now
        version[k] += 1
        due = _due(k, now, left, rate)
        if np.isfinite(due):
            if cs + 1 >= ck.size:
                cs = _rebuild(ck, cj, cv, carried, t_upd, left, rate, version)
            cs = _push(ck, cj, cv, cs, due, k, version[k])
    return cs


@nb.njit(cache=True)
def run_events(sender, receiver, size, left, latency, sent_at, seq, begin, rate, carried, cap, n, fifo, now, until,
               strict, level0, seeds_in, rel):
    """Advance to ``until`` (strict: only events before it; else at it too, the time then
    ``until``). In place: ``left`` (settled to the returned time), ``sent_at``, ``rate``,
    ``carried``. ``begin``: when each transfer starts (<= ``now``: started). ``level0`` and
    ``seeds_in`` (links): the changes since the rates were last shared (transfers removed).
    Returns (now, delivered indices in delivery order, their times); the rates are shared on
    return."""
    f = sender.size
    up = sender.astype(np.int64)
    down = n + receiver.astype(np.int64)
    nl = 2 * n
    lptr, lidx = _links(up, down, nl)
    dirty, fsum, lcnt, lver = np.zeros(nl, np.bool_), np.zeros(nl), np.zeros(nl, np.int64), np.zeros(nl, np.int64)
    dl, assigned, asg, was = np.empty(nl, np.int64), np.zeros(f, np.bool_), np.empty(f, np.int64), np.empty(f)
    hsz = 4 * f + 2 * nl + 8
    hk, hj, hv = np.empty(hsz), np.empty(hsz, np.int64), np.empty(hsz, np.int64)
    seeds = np.empty(4 * f + seeds_in.size + 8, np.int64)
    ns = 0
    for s in seeds_in:
        seeds[ns] = s
        ns += 1
    fresh = np.zeros(f, np.bool_)
    newly = np.empty(f, np.int64)                          # the fresh ones (started sharing since the last sharing)
    nf = 0
    t_upd = np.full(f, now)
    version = np.zeros(f, np.int64)
    gone = np.zeros(f, np.bool_)
    started = np.zeros(f, np.bool_)
    out_idx = np.empty(f, np.int64)
    out_t = np.empty(f)
    m = 0
    cap_c = 4 * f + 8
    ck, cj, cv = np.empty(cap_c), np.empty(cap_c, np.int64), np.empty(cap_c, np.int64)   # last bytes
    dk, dj, dv = np.empty(f + 1), np.empty(f + 1, np.int64), np.empty(f + 1, np.int64)   # deliveries
    sk, sj, sv = np.empty(f + 1), np.empty(f + 1, np.int64), np.empty(f + 1, np.int64)   # starts
    cs, ds, ss = 0, 0, 0
    batch = np.empty(f, np.int64)                          # the starts of one instant
    for k in range(f):
        if begin[k] > now:
            ss = _push(sk, sj, sv, ss, begin[k], k, seq[k])
        else:
            started[k] = True
            if np.isnan(sent_at[k]) and left[k] <= 0.0:
                sent_at[k] = now
        if not np.isnan(sent_at[k]):
            ds = _push(dk, dj, dv, ds, sent_at[k] + latency[k], k, seq[k])
    changed = ns > 0
    # the transfers sharing the links now; a change since the last sharing seeds the links it used
    sending = np.zeros(f, np.bool_)
    for k in range(f):
        sending[k] = started[k] and np.isnan(sent_at[k])
    want = _carried(sender, seq, sending, fifo, n)
    for k in range(f):
        if carried[k] and not want[k]:
            level0 = min(level0, rate[k])
            carried[k], rate[k] = False, 0.0
            seeds[ns], seeds[ns + 1] = up[k], down[k]
            ns += 2
            changed = True
        elif want[k] and (not carried[k] or np.isnan(rate[k])):
            carried[k], fresh[k], rate[k] = True, True, np.nan
            seeds[ns], seeds[ns + 1] = up[k], down[k]
            ns += 2
            newly[nf] = k
            nf += 1
            changed = True
        elif not want[k]:
            rate[k] = 0.0
        elif np.isfinite(_due(k, now, left, rate)):            # carried, its rate standing
            cs = _push(ck, cj, cv, cs, _due(k, now, left, rate), k, version[k])
    while True:
        if changed:                                            # share the links (locally), settle what moved
            cs = reshare(up, down, carried, rate, fresh, cap, lptr, lidx, seeds, ns, 0.0 if nf else level0, dirty,
                         fsum, lcnt, lver, dl, assigned, asg, was, hk, hj, hv, left, t_upd, version, now, ck, cj, cv,
                         cs)
            for a in range(nf):
                fresh[newly[a]] = False
            ns, nf, level0, changed = 0, 0, np.inf, False
        while cs > 0 and (cv[0] != version[cj[0]] or not carried[cj[0]]):   # stale last-byte entries
            _, _, _, cs = _pop(ck, cj, cv, cs)
        t = np.inf
        if cs > 0:
            t = ck[0]
        if ds > 0 and dk[0] < t:
            t = dk[0]
        if ss > 0 and sk[0] < t:
            t = sk[0]
        if not np.isfinite(t) or t > until or (strict and t >= until):
            break
        now = max(now, t)
        tol = now + rel * max(abs(now), 1.0)
        while cs > 0 and ck[0] <= tol:                         # last bytes leave
            _, k, v, cs = _pop(ck, cj, cv, cs)
            if v != version[k] or not carried[k]:
                continue
            level0 = min(level0, rate[k])
            left[k], sent_at[k], carried[k], rate[k] = 0.0, now, False, 0.0
            seeds[ns], seeds[ns + 1] = up[k], down[k]
            ns += 2
            changed = True
            ds = _push(dk, dj, dv, ds, now + latency[k], k, seq[k])
            if fifo:
                q = _next_in_queue(sender[k], sender, seq, started, sent_at, carried, fresh, rate, t_upd, now)
                if q >= 0:
                    seeds[ns], seeds[ns + 1] = up[q], down[q]
                    ns += 2
                    newly[nf] = q
                    nf += 1
        first = m
        while ds > 0 and dk[0] <= tol:                         # deliveries
            _, k, _, ds = _pop(dk, dj, dv, ds)
            if gone[k]:
                continue
            gone[k] = True
            out_idx[m] = k
            out_t[m] = now
            m += 1
        if m > first:                                          # in the order they started
            order = np.argsort(seq[out_idx[first:m]], kind="mergesort")
            out_idx[first:m] = out_idx[first:m][order]
        nb_ = 0
        while ss > 0 and sk[0] <= tol:                         # starts: in the order given (seq)
            _, k, _, ss = _pop(sk, sj, sv, ss)
            batch[nb_] = k
            nb_ += 1
        if nb_ > 1:
            batch[:nb_] = batch[:nb_][np.argsort(seq[batch[:nb_]], kind="mergesort")]
        for b in range(nb_):
            k = batch[b]
            started[k] = True
            t_upd[k] = now
            if left[k] <= 0.0:                                 # zero bytes: sent at once
                sent_at[k] = now
                ds = _push(dk, dj, dv, ds, now + latency[k], k, seq[k])
                continue
            if fifo and _busy(sender[k], sender, carried):
                continue
            carried[k], fresh[k], rate[k] = True, True, np.nan
            seeds[ns], seeds[ns + 1] = up[k], down[k]
            ns += 2
            newly[nf] = k
            nf += 1
            changed = True
    if not strict and until > now:
        now = until                                            # not strict: the clock goes to until
    for k in range(f):                                         # bytes settled at now
        if carried[k] and now > t_upd[k]:
            left[k] = 0.0 if np.isinf(rate[k]) else max(left[k] - rate[k] * (now - t_upd[k]), 0.0)
    return now, out_idx[:m], out_t[:m]


@nb.njit(cache=True)
def _busy(s, sender, carried):
    """fifo: whether sender s's uplink carries a transfer now."""
    for k in range(sender.size):
        if carried[k] and sender[k] == s:
            return True
    return False


@nb.njit(cache=True)
def _next_in_queue(s, sender, seq, started, sent_at, carried, fresh, rate, t_upd, now):
    """fifo: sender s's oldest transfer waiting on its uplink starts being carried now (its
    index; -1: none waits)."""
    best = -1
    for k in range(sender.size):
        if sender[k] == s and started[k] and np.isnan(sent_at[k]) and not carried[k]:
            if best < 0 or seq[k] < seq[best]:
                best = k
    if best >= 0:
        carried[best], fresh[best], rate[best], t_upd[best] = True, True, np.nan, now
    return best


@nb.njit(cache=True)
def _rebuild(ck, cj, cv, carried, t_upd, left, rate, version):
    """The last-byte heap anew from the transfers being carried (its stale entries dropped)."""
    cs = 0
    for k in range(carried.size):
        if carried[k] and rate[k] > 0:
            due = t_upd[k] if np.isinf(rate[k]) else t_upd[k] + left[k] / rate[k]
            cs = _push(ck, cj, cv, cs, due, k, version[k])
    return cs
