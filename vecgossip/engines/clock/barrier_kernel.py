"""The per-node barrier's events compiled as a whole (issue 56, item 2; numba, no numpy call per
event): :meth:`vecgossip.engines.clock.barrier.NodeBarrier._run` hands its state here as flat
arrays (the transfers in flight, each node's phase, compute end and whether it has sent, the
known phases' plans) and this loop runs every event that cannot depend on an unknown round: last
bytes leaving, deliveries, nodes finishing a phase, computes ending and their messages starting,
with the links shared locally after each instant (:func:`.sharing.reshare`). The order at one
instant is the step-by-step loop's (:meth:`~vecgossip.engines.clock.barrier.NodeBarrier._run_steps`):
last bytes, then to a fixed point deliveries, the nodes that finish (ascending), the sends due
(ascending node, each node's messages in edge order)."""
from __future__ import annotations

import numba as nb
import numpy as np

from vecgossip.engines.clock.maxmin import _pop, _push
from vecgossip.engines.clock.sharing import begin as begin_sharing
from vecgossip.engines.clock.sharing import (busy, due, earliest, last_bytes, next_in_queue, prepare, reshare, start,
                                             stop)


@nb.njit(cache=True)
def run_nodes(sender, receiver, size, left, latency, sent_at, seq, rate, carried, tag, counter, cap, n, fifo, now,
              level0, seeds_in, rel, elat, phase_of, until, sent, pmin, known, closed, comp, indeg, got, done, end,
              ends, eoff, eptr, esend, erecv, esize):
    """Runs the per-node barrier from ``now``; in place: the node arrays (``phase_of``, ``until``,
    ``sent``), the plans' counts (``got``, ``done``, ``end``, ``ends``; phase p's row p - pmin).
    In: the F0 transfers in flight (their ``tag``: the phase), ``counter`` the next start's seq;
    the known phases pmin .. known - 1: ``comp`` / ``indeg`` (P, n), edges ``eoff[q] ..
    eoff[q + 1]`` of phase pmin + q sorted by sender (``eptr`` (P, n + 1) within them), ``esend``,
    ``erecv``, ``esize``, ``elat`` (the edges' latencies). Returns (now, the transfers still in flight as indices
    into the F0 + E arrays returned (sender, receiver, size, left, latency, sent_at, seq, rate,
    carried, tag), the next seq, the phases that ended in order with their ends)."""
    f0 = sender.size
    nph = comp.shape[0]
    etot = esend.size
    f = f0 + etot
    S = np.empty(f, np.int64)
    R = np.empty(f, np.int64)
    Z, L, LT, SA, RT = np.empty(f), np.empty(f), np.empty(f), np.full(f, np.nan), np.zeros(f)
    SQ = np.full(f, -1, np.int64)
    TG = np.empty(f, np.int64)
    CA = np.zeros(f, np.bool_)
    live = np.zeros(f, np.bool_)                           # in flight (started, not delivered)
    for k in range(f0):
        S[k], R[k], Z[k], L[k], LT[k], SA[k], SQ[k] = sender[k], receiver[k], size[k], left[k], latency[k], \
            sent_at[k], seq[k]
        RT[k], CA[k], TG[k], live[k] = rate[k], carried[k], tag[k], True
    for q in range(nph):
        for e in range(eoff[q], eoff[q + 1]):
            k = f0 + e
            S[k], R[k], Z[k], L[k], TG[k] = esend[e], erecv[e], esize[e], esize[e], pmin + q
            LT[k] = elat[e]
    up, down, lptr, lidx, ws, seeds, ns, fresh, newly, nf = prepare(S, R, n, seeds_in)
    started = np.zeros(f, np.bool_)
    for k in range(f0):
        started[k] = True
    t_upd = np.full(f, now)
    version = np.zeros(f, np.int64)
    ck, cj, cv = np.empty(4 * f + 8), np.empty(4 * f + 8, np.int64), np.empty(4 * f + 8, np.int64)
    dk, dj, dv = np.empty(f + 1), np.empty(f + 1, np.int64), np.empty(f + 1, np.int64)
    uk, uj, uv = np.empty(4 * n + 8), np.empty(4 * n + 8, np.int64), np.empty(4 * n + 8, np.int64)   # compute ends
    cs, ds, us = 0, 0, 0
    uver = np.zeros(n, np.int64)
    over_p = np.empty(nph, np.int64)
    over_t = np.empty(nph)
    no = 0
    # the state handed in: sharing anew where it changed since the last sharing, the heaps
    changed = ns > 0
    for k in range(f0):
        if not np.isnan(SA[k]):
            ds = _push(dk, dj, dv, ds, SA[k] + LT[k], k, SQ[k])
            if CA[k]:                                          # its last byte left since the last sharing
                ns, level0 = stop(k, CA, RT, up, down, seeds, ns, level0)
                changed = True
            CA[k], RT[k] = False, 0.0
        elif CA[k] and not np.isnan(RT[k]):
            t = due(k, now, L, RT)
            if np.isfinite(t):
                cs = _push(ck, cj, cv, cs, t, k, 0)
    for k in range(f0):
        if fifo and np.isnan(SA[k]) and not CA[k] and not busy(S[k], S, CA):
            q = next_in_queue(S[k], S, SQ, started, SA, CA)
            if q >= 0:
                ns, nf = begin_sharing(q, CA, fresh, RT, up, down, seeds, ns, newly, nf)
                changed = True
        elif not fifo and np.isnan(SA[k]) and (not CA[k] or np.isnan(RT[k])):
            ns, nf = begin_sharing(k, CA, fresh, RT, up, down, seeds, ns, newly, nf)
            changed = True
    for i in range(n):
        if np.isfinite(until[i]):
            us = _push(uk, uj, uv, us, until[i], i, uver[i])
    order = np.empty(n, np.int64)
    while True:
        tol = now + rel * max(abs(now), 1.0)
        while True:                                            # to a fixed point at now
            moved = False
            while ds > 0 and dk[0] <= tol:                     # deliveries
                _, k, _, ds = _pop(dk, dj, dv, ds)
                if not live[k]:
                    continue
                live[k] = False
                got[TG[k] - pmin, R[k]] += 1
                moved = True
            nfin = 0
            for i in range(n):                                 # the nodes that finish their phase (ascending)
                if sent[i] and got[phase_of[i] - pmin, i] >= indeg[phase_of[i] - pmin, i]:
                    order[nfin] = i
                    nfin += 1
            for a in range(nfin):
                i = order[a]
                q = phase_of[i] - pmin
                done[q] += 1
                end[q] = max(end[q], now)
                ends[q, i] = now
                if done[q] == n:
                    over_p[no], over_t[no] = pmin + q, end[q]
                    no += 1
                sent[i] = False
                phase_of[i] += 1
                until[i] = np.inf
                if phase_of[i] < known:
                    until[i] = now + comp[phase_of[i] - pmin, i]
                    uver[i] += 1
                    us = _push(uk, uj, uv, us, until[i], i, uver[i])
                moved = True
            nsend = 0
            while us > 0 and (uv[0] != uver[uj[0]] or not np.isfinite(until[uj[0]])):
                _, _, _, us = _pop(uk, uj, uv, us)
            while us > 0 and uk[0] <= now:                     # computes ended: their sends
                _, i, v, us = _pop(uk, uj, uv, us)
                if v != uver[i] or not until[i] <= now:
                    continue
                order[nsend] = i
                nsend += 1
            if nsend > 1:
                order[:nsend] = np.sort(order[:nsend])
            for a in range(nsend):
                i = order[a]
                q = phase_of[i] - pmin
                for e in range(eoff[q] + eptr[q, i], eoff[q] + eptr[q, i + 1]):
                    k = f0 + e
                    started[k], live[k], SQ[k], t_upd[k] = True, True, counter, now
                    counter += 1
                    ds, ns, nf, began = start(k, now, L, SA, LT, SQ, S, CA, fresh, RT, up, down, seeds, ns, newly, nf,
                                              dk, dj, dv, ds, fifo)
                    changed = changed or began
                until[i] = np.inf
                sent[i] = True
                moved = True
            if not moved:
                break
        if changed:                                            # share the links (locally), settle what moved
            cs = reshare(up, down, CA, RT, fresh, newly, nf, cap, lptr, lidx, seeds, ns, level0, ws, L, t_upd,
                         version, now, ck, cj, cv, cs)
            ns, nf, level0, changed = 0, 0, np.inf, False
        if not closed:
            wait = False
            for i in range(n):
                if phase_of[i] >= known:
                    wait = True
                    break
            if wait:
                break                                          # a node waits for the next round
        while cs > 0 and (cv[0] != version[cj[0]] or not CA[cj[0]]):
            _, _, _, cs = _pop(ck, cj, cv, cs)
        t = earliest(ck, cs, dk, ds, uk, us)
        if not np.isfinite(t):
            break
        now = max(now, t)
        tol = now + rel * max(abs(now), 1.0)
        cs, ds, ns, nf, level0, left_ = last_bytes(now, tol, ck, cj, cv, cs, dk, dj, dv, ds, version, CA, RT, L,
                                                   SA, LT, SQ, S, started, fresh, up, down, seeds, ns, newly,
                                                   nf, level0, fifo)
        changed = changed or left_
    keep = np.empty(f, np.int64)
    m = 0
    for k in range(f):                                         # in flight, in start order; bytes settled at now
        if live[k]:
            if CA[k] and now > t_upd[k]:
                L[k] = 0.0 if np.isinf(RT[k]) else max(L[k] - RT[k] * (now - t_upd[k]), 0.0)
            keep[m] = k
            m += 1
    keep = keep[:m][np.argsort(SQ[keep[:m]], kind="mergesort")]
    return (now, keep, S, R, Z, L, LT, SA, SQ, RT, CA, TG, counter, over_p[:no], over_t[:no])
