"""The tick engine's windows in virtual seconds (issue 48): each node's steps at k x c_i, and which
window (tick) each falls in; ``message_bytes``, one whole-model message's size.

With ``clock.enabled=true`` a tick is a window of ``clock.resolution`` seconds, [t r, (t + 1) r):
node i's steps complete at 0, c_i, 2 c_i, ... (c_i its seconds per step, :mod:`~vecgossip.engines.
clock.compute`; all train at 0, the tick engine's convention), each computed exactly as ``k x c_i``
(no accumulated rounding), and a step runs in the window its completion time falls in. Churn
(``clock.churn``) is read at every window's start: an offline node's step slot passes untrained."""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from vecgossip.engines.tick.schedule import NEVER, Schedule

EPS = 1e-9          # a time within EPS x r of a window's start belongs to that window (rounding of k x c)


@dataclass
class Seconds:
    """The clock of one tick-engine run: ``step_seconds`` (n,) each node's seconds per step,
    ``uplink`` / ``downlink`` (n,) bytes/s (inf: no limit), ``latency`` (n, n) seconds (row =
    sender), ``policy`` (fair | fifo), ``resolution`` the seconds of one tick."""

    step_seconds: np.ndarray
    uplink: np.ndarray
    downlink: np.ndarray
    latency: np.ndarray
    policy: str = "fair"
    resolution: float = 1.0
    churn: object = None          # :class:`~vecgossip.engines.clock.churn.Churn` or None (everyone online)

    def window(self, seconds) -> np.ndarray:
        """The tick (window index) of each time."""
        return np.floor(np.asarray(seconds, float) / self.resolution + EPS).astype(np.int64)

    @cached_property
    def instant(self) -> bool:
        """Every message arrives when it is sent (no latency, no bandwidth limit); read every
        window, computed once (the links do not change during a run)."""
        return bool(np.isinf(self.uplink).all() and np.isinf(self.downlink).all() and not self.latency.any())


class SecondsSchedule(Schedule):
    """Who trains in which window: node i's k-th step completes at ``k x c_i`` seconds."""

    def __init__(self, n: int, clock: Seconds, server: int | None = None) -> None:
        super().__init__(n, (1, 1), np.random.default_rng(0), None, server)
        if n and clock.step_seconds.min() < clock.resolution * (1 - EPS):
            raise ValueError(f"clock.resolution={clock.resolution} is longer than the fastest node's step "
                             f"({clock.step_seconds.min():.4g} s): a tick holds at most one step of a node")
        self.clock = clock
        self.steps = np.zeros(n, dtype=np.int64)           # steps completed so far
        self.stopped = np.zeros(n, dtype=bool)
        if server is not None:
            self.stopped[server] = True
        self.sent_at = np.zeros(n)                          # completion time of each node's step due last
        self.skipped = np.zeros(n, dtype=np.int64)          # step slots passed offline (churn)
        self.arrivals = None                                # () -> the next window a message arrives in
        self._place()

    def due(self, t: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(the online nodes whose step completes in window t, who is online at the window's
        start); under churn an offline node's step slot passes untrained (its next one is due
        c_i later, as the tick engine's offline nodes skip their slot)."""
        self.now = t
        online = None
        if self.clock.churn is not None:
            online = self.clock.churn.online(t * self.clock.resolution)
            self.online_now = int(online.sum())
        self.online = online
        due = np.flatnonzero(self.next_train == t)
        if online is not None and due.size:
            skip = due[~online[due]]
            self.steps[skip] += 1
            self.skipped[skip] += 1
            self._place()
            due = due[online[due]]
        self.sent_at[due] = self.steps[due] * self.clock.step_seconds[due]   # its train and sends read it
        return (None, online) if due.size == 0 else (due, online)

    def _place(self) -> None:
        self.next_train[:] = np.where(self.stopped, NEVER, self.clock.window(self.steps * self.clock.step_seconds))

    def reschedule(self, nodes: np.ndarray) -> None:
        self.steps[nodes] += 1
        self._place()

    def stop(self, nodes: np.ndarray) -> None:
        self.stopped[nodes] = True
        self._place()

    def next_event(self, t: int, every: int, period: int | None, end: int) -> int:
        if self.clock.churn is not None:        # availability is read at every window's start
            return t + 1
        nxt = super().next_event(t, every, period, end)
        if self.arrivals is not None:
            nxt = min(nxt, max(t + 1, self.arrivals()))
        return nxt

    def state(self) -> dict:
        return {"steps": self.steps.copy(), "stopped": self.stopped.copy(), "sent_at": self.sent_at.copy(),
                "skipped": self.skipped.copy()}

    def load(self, d: dict) -> None:
        self.steps[:], self.stopped[:], self.sent_at[:] = d["steps"], d["stopped"], d["sent_at"]
        self.skipped[:] = d["skipped"]
        self._place()


def message_bytes(params: int, element_size: int, compression: float) -> float:
    """One gossip message's bytes: the model's parameters, or under weight compression the expected
    ``ceil(p x P)`` sent elements (the mask comes from a shared seed: no indices travel)."""
    return float(math.ceil(compression * params) * element_size)

