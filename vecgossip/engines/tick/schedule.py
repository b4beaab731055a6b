"""Who trains when on the tick clock (section III-A): every node trains at tick 0, then every
T_acq ticks (fixed, or one uniform draw in [lo, hi] per step); under faults an offline node skips
its slot (its next tick is drawn all the same)."""
from __future__ import annotations

import numpy as np

from vecgossip.core.faults import Faults

NEVER = np.iinfo(np.int64).max


class Schedule:
    """Every node's next training tick (``next_train`` (N,)), and who is online now."""

    def __init__(self, n: int, t_acq: tuple[int, int], rng: np.random.Generator, faults: Faults | None,
                 server: int | None = None) -> None:
        self.t_acq, self.rng, self.faults = t_acq, rng, faults
        self.next_train = np.zeros(n, dtype=np.int64)             # all train at tick 0
        if server is not None:
            self.next_train[server] = NEVER                      # a relay server never trains
        self.online: np.ndarray | None = None     # faults: who is online at this tick (due())
        self.online_now = n
        self.now = 0                              # the tick being processed

    def due(self, t: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(the nodes that train at tick t, who is online): None when no node's tick has come;
        with faults, offline nodes skip this training slot (their next tick is drawn)."""
        self.now = t
        due = np.flatnonzero(self.next_train == t)
        if due.size == 0:
            return None, None
        online = None
        if self.faults is not None:
            online = self.faults.online(t)
            self.online_now = int(online.sum())
            skip = due[~online[due]]
            self.next_train[skip] += self.draw(skip.size, self.faults.rng)
            due = due[online[due]]
        self.online = online
        return due, online

    def reschedule(self, nodes: np.ndarray) -> None:
        """The trained nodes' next training tick: += T_acq (fixed, or one uniform draw each)."""
        self.next_train[nodes] += self.draw(nodes.size, self.rng)

    def draw(self, size: int, rng: np.random.Generator):
        lo, hi = self.t_acq
        return lo if lo == hi else rng.integers(lo, hi + 1, size=size)

    def stop(self, nodes: np.ndarray) -> None:
        """These nodes never train again (isolated)."""
        self.next_train[nodes] = NEVER

    def next_event(self, t: int, every: int, period: int | None, end: int) -> int:
        """The next tick where something happens: a node trains, an evaluation, a peer update."""
        nxt = [int(self.next_train.min()), (t // every + 1) * every, end]
        if period is not None:
            nxt.append((t // period + 1) * period)
        return min(nxt)
