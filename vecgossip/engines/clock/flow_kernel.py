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

from vecgossip.engines.clock.maxmin import _pop, _push
from vecgossip.engines.clock.sharing import begin as begin_sharing
from vecgossip.engines.clock.sharing import due, earliest, last_bytes, prepare, reshare, start, stop


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
def run_events(sender, receiver, size, left, latency, sent_at, seq, begin, rate, carried, cap, n, fifo, now, until,
               strict, level0, seeds_in, rel):
    """Advance to ``until`` (strict: only events before it; else at it too, the time then
    ``until``). In place: ``left`` (settled to the returned time), ``sent_at``, ``rate``,
    ``carried``. ``begin``: when each transfer starts (<= ``now``: started). ``level0`` and
    ``seeds_in`` (links): the changes since the rates were last shared (transfers removed).
    Returns (now, delivered indices in delivery order, their times); the rates are shared on
    return."""
    f = sender.size
    up, down, lptr, lidx, ws, seeds, ns, fresh, newly, nf = prepare(sender, receiver, n, seeds_in)
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
            ns, level0 = stop(k, carried, rate, up, down, seeds, ns, level0)
            changed = True
        elif want[k] and (not carried[k] or np.isnan(rate[k])):
            ns, nf = begin_sharing(k, carried, fresh, rate, up, down, seeds, ns, newly, nf)
            changed = True
        elif not want[k]:
            rate[k] = 0.0
        elif np.isfinite(due(k, now, left, rate)):             # carried, its rate standing
            cs = _push(ck, cj, cv, cs, due(k, now, left, rate), k, version[k])
    while True:
        if changed:                                            # share the links (locally), settle what moved
            cs = reshare(up, down, carried, rate, fresh, newly, nf, cap, lptr, lidx, seeds, ns, level0, ws, left,
                         t_upd, version, now, ck, cj, cv, cs)
            ns, nf, level0, changed = 0, 0, np.inf, False
        while cs > 0 and (cv[0] != version[cj[0]] or not carried[cj[0]]):   # stale last-byte entries
            _, _, _, cs = _pop(ck, cj, cv, cs)
        t = earliest(ck, cs, dk, ds, sk, ss)
        if not np.isfinite(t) or t > until or (strict and t >= until):
            break
        now = max(now, t)
        tol = now + rel * max(abs(now), 1.0)
        cs, ds, ns, nf, level0, left_ = last_bytes(now, tol, ck, cj, cv, cs, dk, dj, dv, ds, version, carried, rate,
                                                   left, sent_at, latency, seq, sender, started, fresh, up, down, seeds,
                                                   ns, newly, nf, level0, fifo)
        changed = changed or left_
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
            ds, ns, nf, began = start(k, now, left, sent_at, latency, seq, sender, carried, fresh, rate, up, down,
                                      seeds, ns, newly, nf, dk, dj, dv, ds, fifo)
            changed = changed or began
    if not strict and until > now:
        now = until                                            # not strict: the clock goes to until
    for k in range(f):                                         # bytes settled at now
        if carried[k] and now > t_upd[k]:
            left[k] = 0.0 if np.isinf(rate[k]) else max(left[k] - rate[k] * (now - t_upd[k]), 0.0)
    return now, out_idx[:m], out_t[:m]
