"""Churn in virtual seconds (issue 48): who is online at a time t, as a pure function of the run's
seed and t (no state: a resumed run, a replica and every process see the same availability).

- ``none``: everyone, always;
- ``bernoulli``: time is cut into slots of ``period`` seconds; in each slot each node is online
  with probability ``availability``, independently (the slot's own stream);
- ``sessions``: each node alternates online and offline sessions of exponential lengths (means
  ``online_seconds`` and ``offline_seconds``), starting online with probability
  ``online_seconds / (online_seconds + offline_seconds)`` (the stationary share), its own stream;
- ``diurnal``: node i is online for a contiguous ``availability`` share of every ``day`` seconds,
  from its own phase (drawn uniformly): (t / day + phase_i) mod 1 < availability;
- ``trace``: a FedScale client-behaviour trace (:mod:`.traces`): node i follows a client drawn
  from it (online from ``active[k]`` to ``inactive[k]``, repeating every ``finish_time``).

The round engine reads availability at each round's start (a barrier round does not see a node
leave mid-round); :meth:`Churn.next_online` is when the next offline node comes back, for a
round in which nobody is online."""
from __future__ import annotations

from typing import Annotated, Literal, Optional

import numpy as np
from pydantic import Field

from vecgossip.core.options import Options

Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class ChurnConfig(Options):
    """Who is online when (virtual seconds)."""

    model: Literal["none", "bernoulli", "sessions", "diurnal", "trace"] = "none"
    availability: Annotated[float, Field(gt=0, le=1)] = 0.8   # bernoulli / diurnal: the share online
    period: Positive = 60.0               # bernoulli: seconds a slot
    online_seconds: Positive = 600.0      # sessions: mean online session
    offline_seconds: Positive = 150.0     # sessions: mean offline session
    day: Positive = 86_400.0              # diurnal: seconds a cycle
    trace: Optional[str] = None           # trace: a FedScale client-behaviour file (pickle or json)


class Churn:
    """Availability of ``n`` nodes under ``cfg``, from ``seed`` (streams ``[seed, stream, ...]``)."""

    def __init__(self, cfg: ChurnConfig, n: int, seed: int, stream: int, behaviour: dict | None = None) -> None:
        self.cfg, self.n, self.seed, self.stream = cfg, n, seed, stream
        rng = np.random.default_rng([seed, stream, 2])
        self.phase = rng.uniform(0.0, 1.0, n)                      # diurnal
        self.clients = None
        if cfg.model == "trace":
            if behaviour is None:
                raise ValueError("churn model trace needs its behaviour trace (clock.churn.trace)")
            keys = sorted(behaviour)
            self.clients = [behaviour[keys[i]] for i in rng.choice(len(keys), n, replace=n > len(keys))]
        self._sessions: list[list[float]] = [[] for _ in range(n)]   # sessions: switch times, grown lazily
        self._first_on = np.zeros(n, dtype=bool)
        if cfg.model == "sessions":
            share = cfg.online_seconds / (cfg.online_seconds + cfg.offline_seconds)
            self._first_on = rng.uniform(0.0, 1.0, n) < share
            self._gens = [np.random.default_rng([seed, stream, 3, i]) for i in range(n)]

    def online(self, t: float) -> np.ndarray:
        """(n,) bool: who is online at time ``t`` (seconds)."""
        c = self.cfg
        if c.model == "none":
            return np.ones(self.n, dtype=bool)
        if c.model == "bernoulli":
            slot = int(np.floor(t / c.period))
            return np.random.default_rng([self.seed, self.stream, 4, slot]).uniform(0.0, 1.0, self.n) < c.availability
        if c.model == "diurnal":
            return np.mod(t / c.day + self.phase, 1.0) < c.availability
        if c.model == "trace":
            from vecgossip.engines.clock.traces import online
            return np.array([bool(online(e, t)) for e in self.clients])
        return np.array([self._on_at(i, t) for i in range(self.n)])

    def _switches(self, i: int, t: float) -> list[float]:
        """Node i's session switch times, drawn until past ``t``."""
        s, c = self._sessions[i], self.cfg
        while not s or s[-1] <= t:
            on = self._first_on[i] ^ (len(s) % 2 == 1)                 # the session that starts at s[-1] (or 0)
            s.append((s[-1] if s else 0.0) + self._gens[i].exponential(c.online_seconds if on else c.offline_seconds))
        return s

    def _on_at(self, i: int, t: float) -> bool:
        s = self._switches(i, t)
        k = int(np.searchsorted(s, t, side="right"))                  # switches at or before t
        return bool(self._first_on[i] ^ (k % 2 == 1))

    def next_online(self, t: float) -> float:
        """The first time after ``t`` at which some node offline at ``t`` is online (inf: never)."""
        c, off = self.cfg, np.flatnonzero(~self.online(t))
        if not off.size:
            return t
        if c.model == "bernoulli":
            slot = int(np.floor(t / c.period))
            for k in range(1, 100_000):                                  # the next slot with anyone on
                if self.online((slot + k) * c.period).any():
                    return (slot + k) * c.period
            return np.inf
        if c.model == "diurnal":
            return float(t + (np.mod(-(t / c.day + self.phase[off]), 1.0) * c.day).min())
        if c.model == "trace":
            best = np.inf
            for i in off:
                e = self.clients[i]
                period, base = float(e["finish_time"]), np.floor(t / float(e["finish_time"])) * float(e["finish_time"])
                starts = np.sort(np.asarray(e["active"], float))
                later = [base + a for a in starts if base + a > t] + [base + period + a for a in starts]
                best = min(best, min(later) if later else np.inf)
            return float(best)
        best = np.inf
        for i in off:
            s = self._switches(i, t)
            k = int(np.searchsorted(s, t, side="right"))
            best = min(best, s[k])                                       # its next switch turns it on
        return float(best)
