"""The transfers' events up to a time, compiled as a whole (issue 56; numba, no numpy call per
event): :meth:`vecgossip.engines.clock.transfers.Transfers.run_until` hands its arrays here, and
this loop moves the bytes from event to event (a transfer's last byte leaving re-shares the links
incrementally, :mod:`.maxmin`), marks each transfer delivered a latency after its last byte, and
returns the deliveries in order, the same events and times as the step-by-step methods
(``advance``, ``next_event``, ``delivered``) it replaces on the hot path."""
from __future__ import annotations

import numba as nb
import numpy as np

from vecgossip.engines.clock.maxmin import entry_level, refill


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
def run_events(sender, receiver, size, left, latency, sent_at, seq, rate, carried, cap, n, fifo, now, until,
               strict, level0, stale, rel, slot, remain):
    """Advance to ``until`` (strict: only events before it; else at it too, the time then
    ``until``). In place: ``left``, ``sent_at``, ``rate``, ``carried``. Returns (now, delivered
    indices in delivery order, their times, stale, level0). ``slot`` (one per transfer, -1: none)
    and ``remain`` (per slot): a delivery counts down its slot's ``remain``; the loop stops after
    the instant at which one reaches 0 (the per-node barrier: a node may finish its phase then,
    and its next messages change the sharing from that instant on)."""
    f = sender.size
    up = sender.astype(np.int64)
    down = n + receiver.astype(np.int64)
    gone = np.zeros(f, np.bool_)
    out_idx = np.empty(f, np.int64)
    out_t = np.empty(f)
    m = 0
    while True:
        if stale:                                              # share the links anew (incrementally)
            sending = np.isnan(sent_at) & ~gone
            new = _carried(sender, seq, sending, fifo, n)
            fresh = np.zeros(f, np.bool_)
            anyfresh = False
            for k in range(f):
                if carried[k] and not new[k]:
                    level0 = min(level0, rate[k])
                if new[k] and (not carried[k] or np.isnan(rate[k])):
                    fresh[k] = True
                    rate[k] = np.nan
                    anyfresh = True
            if anyfresh:
                level0 = min(level0, entry_level(up, down, new, rate, cap, fresh))
            if anyfresh or level0 < np.inf:
                refill(up, down, new, rate, cap, level0)
            for k in range(f):
                carried[k] = new[k]
                if not new[k]:
                    rate[k] = 0.0
            level0, stale = np.inf, False
        nxt_byte, nxt = np.inf, np.inf
        for k in range(f):
            if gone[k]:
                continue
            if np.isnan(sent_at[k]):
                if carried[k] and rate[k] > 0:
                    tb = now if np.isinf(rate[k]) else now + left[k] / rate[k]
                    if tb < nxt_byte:
                        nxt_byte = tb
            else:
                td = sent_at[k] + latency[k]
                if td < nxt:
                    nxt = td
        if nxt_byte < nxt:
            nxt = nxt_byte
        if not np.isfinite(nxt) or nxt > until or (strict and nxt >= until):
            if strict or until <= now:
                break
            nxt = until                                        # not strict: the clock goes to until
        step = nxt
        dt = step - now
        for k in range(f):                                     # the bytes move; last bytes leave
            if gone[k] or not np.isnan(sent_at[k]) or not carried[k]:
                continue
            if np.isinf(rate[k]):
                left[k] = 0.0
            else:
                last = now + left[k] / rate[k] if rate[k] > 0 else np.inf
                left[k] -= rate[k] * dt
                if left[k] <= rel * size[k] or last <= step:
                    left[k] = 0.0
            if left[k] <= 0.0:
                sent_at[k] = step
                stale = True
        now = step
        tol = now + rel * max(abs(now), 1.0)
        first = m
        for k in range(f):                                     # delivered by now
            if not gone[k] and not np.isnan(sent_at[k]) and sent_at[k] + latency[k] <= tol:
                gone[k] = True
                out_idx[m] = k
                out_t[m] = now
                m += 1
        if m > first:                                          # in the order they started
            order = np.argsort(seq[out_idx[first:m]], kind="mergesort")
            out_idx[first:m] = out_idx[first:m][order]
            halt = False
            if slot.size:
                for j in range(first, m):
                    s = slot[out_idx[j]]
                    if s >= 0:
                        remain[s] -= 1
                        if remain[s] <= 0:
                            halt = True
            if halt:
                break
    return now, out_idx[:m], out_t[:m], stale, level0
