"""One barrier round as an event loop over :class:`~.transfers.Transfers` (issue 48's loop, kept
for the ``greedy`` policy and as the compiled loop's twin, :mod:`.round_kernel`)."""
from __future__ import annotations

import numpy as np

from vecgossip.engines.clock.events import Heap
from vecgossip.engines.clock.transfers import Transfers


def transfers_round(compute: np.ndarray, sender: np.ndarray, receiver: np.ndarray, size: np.ndarray,
                    uplink: np.ndarray, downlink: np.ndarray, latency: np.ndarray, policy: str = "fair",
                    leave: np.ndarray | None = None) -> tuple:
    """:func:`~.rounds.round_fates` as an event loop over :class:`~.transfers.Transfers` (one
    Python step per event): any policy, ``greedy`` included; for ``fair`` and ``fifo`` the
    compiled loop (:mod:`.round_kernel`) is used, and this is its twin in the tests."""
    n = compute.size
    sender, receiver, size = np.asarray(sender, np.int64), np.asarray(receiver, np.int64), np.asarray(size, float)
    leave = np.full(n, np.inf) if leave is None else np.asarray(leave, float)
    done = np.minimum(np.asarray(compute, float), leave)
    arrived, gone = np.zeros(sender.size, dtype=bool), np.zeros(n, dtype=bool)
    heap = Heap()
    for i in np.argsort(compute, kind="stable"):
        heap.push(float(compute[i]), "send", int(i))
    for i in np.flatnonzero(np.isfinite(leave))[np.argsort(leave[np.isfinite(leave)], kind="stable")]:
        heap.push(float(leave[i]), "leave", int(i))
    flow = Transfers(uplink, downlink, policy)

    def deliver():
        got = flow.delivered()
        arrived[flow.tag[got]] = True
        np.maximum.at(done, flow.receiver[got], flow.now)
        flow.remove(got)

    started = np.zeros(n, dtype=bool)

    def finished(i: int) -> bool:
        """Node i has computed, its messages have arrived and so have those it waits for."""
        mine = receiver == i
        return bool(started[i] and not flow.involving(np.array([i])).size
                    and (arrived[mine] | gone[sender[mine]]).all())

    while flow.sender.size or any(e.kind == "send" for e in heap.items):
        t = min(heap.peek(), flow.next_event())
        flow.advance(t)
        deliver()
        if heap.peek() > flow.now:
            continue
        wave = heap.wave(0.0)
        for ev in wave:                                   # leaving first: its sends at that instant are not sent
            if ev.kind == "leave" and not gone[ev.node] and not finished(ev.node):
                gone[ev.node] = True
                flow.remove(flow.involving(np.array([ev.node])))
        starts = [ev.node for ev in wave if ev.kind == "send" and not gone[ev.node]]
        started[starts] = True
        edges = np.flatnonzero(np.isin(sender, starts) & ~gone[receiver]) if starts else np.zeros(0, np.int64)
        if edges.size:                                    # in edge order
            s, r = sender[edges], receiver[edges]
            flow.start(s, r, size[edges], latency[s, r], edges)
            deliver()                                     # zero bytes and zero latency: at once
    stay = ~gone
    counted = arrived & stay[receiver]
    end = max(float(done[stay].max(initial=0.0)), float(leave[gone].max(initial=0.0)))   # the barrier waits for
    return end, done, arrived, counted, gone                           # a node until it has left


