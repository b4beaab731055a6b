"""Rounds through a server in virtual seconds (issue 55: timed federated learning). The server is
one more node, index n, with its own uplink and downlink (``clock.links.server``) and latency to
every client (``clock.links.server_latency``): its links are timed like any node's, shared by
the policy (:mod:`.transfers`) among every transfer through them.

A synchronous round (FedAvg, McMahan et al. 2017; :func:`server_round`): at its start the server
sends the model (``down`` bytes) to each participant, in ascending order (the order a FIFO uplink
serves them); a participant computes for ``compute[i]`` seconds once its download has arrived,
then uploads ``up`` bytes; the round ends when the server has every upload (the barrier is the
server's). A participant that goes offline before its upload has arrived (``leave[i]``, churn)
has its transfers aborted there and is not averaged; the round ends without it.

The asynchronous server (FedBuff, Nguyen et al. 2022) is :mod:`.dispatch`."""
from __future__ import annotations

import heapq

import numpy as np

from vecgossip.engines.clock.events import Heap
from vecgossip.engines.clock.transfers import Transfers


def server_round(compute: np.ndarray, clients: np.ndarray, down: float, up: float, uplink: np.ndarray,
                 downlink: np.ndarray, latency: float, policy: str = "fair",
                 leave: np.ndarray | None = None) -> tuple[float, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(duration, arrived (n,) bool, done (n,), busy (n,), fetched (n,) bool) of one round from time 0 through the server,
    node n = ``compute.size``: ``uplink`` / ``downlink`` (n + 1,) bytes/s, the server's last;
    ``latency`` seconds one way between a client and the server. ``clients``: the participants
    (ascending); ``arrived[i]``: client i's upload reached the server; ``done[i]``: when (0
    otherwise); ``busy[i]``: its seconds computing (cut short when it left); ``fetched[i]``: its download arrived. ``leave`` (n,): when each client goes offline (inf: stays): its transfers abort
    then. The duration is the last upload's arrival, or the last leave when none arrived (0
    without participants)."""
    n = compute.size
    clients = np.asarray(clients, np.int64)
    leave = np.full(n, np.inf) if leave is None else np.asarray(leave, float)
    done, arrived, gone = np.zeros(n), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    got_at = np.full(n, np.inf)                                    # when each download arrived
    flow = Transfers(uplink, downlink, policy)
    heap = Heap()
    for i in clients[np.argsort(leave[clients], kind="stable")]:
        if np.isfinite(leave[i]):
            heap.push(float(leave[i]), "leave", int(i))
    live = clients[leave[clients] > 0]
    gone[clients[leave[clients] <= 0]] = True
    flow.start(np.full(live.size, n), live, down, latency, live)           # tag i: i's download
    last_leave = 0.0
    while len(heap) or flow.sender.size:
        t = min(heap.peek(), flow.next_event())
        flow.advance(t)
        got = flow.delivered()
        for k in got:
            i = int(flow.tag[k])
            if i < n:                                              # a download: compute, then upload
                got_at[i] = t
                heap.push(t + float(compute[i]), "upload", i)
            else:
                arrived[i - n], done[i - n] = True, t
        flow.remove(got)
        if heap.peek() > flow.now:
            continue
        for ev in heap.wave(0.0):
            if ev.kind == "leave" and not arrived[ev.node]:
                gone[ev.node] = True
                last_leave = max(last_leave, ev.time)
                flow.remove(flow.involving(np.array([ev.node])))
            elif ev.kind == "upload" and not gone[ev.node]:
                flow.start(ev.node, n, up, latency, n + ev.node)
        heap.items = [e for e in heap.items if not (e.kind == "upload" and gone[e.node])]
        heapq.heapify(heap.items)
        if not flow.sender.size and all(e.kind == "leave" for e in heap.items):
            break                                               # nothing left to wait for
    duration = float(done[arrived].max()) if arrived.any() else (last_leave if clients.size else 0.0)
    busy, began = np.zeros(n), np.isfinite(got_at)
    busy[began] = np.minimum(compute[began], np.maximum(leave[began] - got_at[began], 0.0))
    return duration, arrived, done, busy, began
