"""Churn in virtual seconds (issue 48): who is online at a time t, as a pure function of the run's
seed and t (no state: a resumed run, a replica and every process see the same availability).

- ``none``: everyone, always;
- ``bernoulli``: time is cut into slots of ``period`` seconds; in each slot each node is online
  with probability ``availability``, independently (the slot's own stream);
- ``sessions``: each node alternates online and offline sessions of exponential lengths (means
  ``online_seconds`` and ``offline_seconds``), starting online with probability
  ``online_seconds / (online_seconds + offline_seconds)`` (the stationary share; lengths drawn
  for all nodes in blocks, in order);
- ``diurnal``: node i is online for a contiguous ``availability`` share of every ``day`` seconds,
  from its own phase (drawn uniformly): (t / day + phase_i) mod 1 < availability;
- ``trace``: a FedScale client-behaviour trace (:mod:`.traces`): node i follows a client drawn
  from it (online from ``active[k]`` to ``inactive[k]``, repeating every ``finish_time``).

The round engine reads availability at each round's start: who takes part; a node that goes
offline during the round (:meth:`Churn.next_offline`) has its transfers aborted there and the
round ends without it (:mod:`.rounds`, :mod:`.server`). :meth:`Churn.next_online` is when the
next offline node comes back, for a round in which nobody is online."""
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


BLOCK = 64          # sessions: switch times drawn per node in blocks of this many
HORIZON = 1000      # bernoulli: slots next_offline looks ahead (a node online 1000 slots running: never leaves)


class Churn:
    """Availability of ``n`` nodes under ``cfg``, from ``seed`` (streams ``[seed, stream, ...]``).
    Every model answers for all nodes at once (node-first arrays, no loop over nodes)."""

    def __init__(self, cfg: ChurnConfig, n: int, seed: int, stream: int, behaviour: dict | None = None) -> None:
        self.cfg, self.n, self.seed, self.stream = cfg, n, seed, stream
        rng = np.random.default_rng([seed, stream, 2])
        self.phase = rng.uniform(0.0, 1.0, n)                      # diurnal
        if cfg.model == "trace":
            if behaviour is None:
                raise ValueError("churn model trace needs its behaviour trace (clock.churn.trace)")
            keys = sorted(behaviour)
            self.clients = [behaviour[keys[i]] for i in rng.choice(len(keys), n, replace=n > len(keys))]
            self.set_clients(self.clients)
        if cfg.model == "sessions":
            share = cfg.online_seconds / (cfg.online_seconds + cfg.offline_seconds)
            self._first_on = rng.uniform(0.0, 1.0, n) < share
            self._gen = np.random.default_rng([seed, stream, 3])     # blocks of (n, BLOCK) draws, in order
            self._switch = np.zeros((n, 0))                          # (n, S) each node's switch times

    def set_clients(self, clients: list[dict]) -> None:
        """trace: node i follows ``clients[i]``; their sessions as padded (n, K) arrays."""
        self.clients = list(clients)
        k = max(1, max(len(e["active"]) for e in self.clients))
        self.active = np.full((self.n, k), np.inf)
        self.inactive = np.full((self.n, k), -np.inf)
        for i, e in enumerate(self.clients):
            self.active[i, :len(e["active"])] = e["active"]
            self.inactive[i, :len(e["inactive"])] = e["inactive"]
        self.finish = np.array([float(e["finish_time"]) for e in self.clients])

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
        if c.model == "trace":      # FedScale's is_active: active[k] <= t mod finish_time <= inactive[k] for some k
            tt = np.mod(t, self.finish)[:, None]
            return ((self.active <= tt) & (tt <= self.inactive)).any(axis=1)
        return self._first_on ^ (self._switched(t) % 2 == 1)

    def _grow(self, t: float) -> None:
        """sessions: draw blocks of switch times until every node's last is past ``t``. Session j
        of node i is online when ``first_on[i]`` xor (j odd); its length is exponential with that
        state's mean (blocks drawn in order: the times do not depend on the queries' order)."""
        c = self.cfg
        while not self._switch.shape[1] or self._switch[:, -1].min() <= t:
            j = self._switch.shape[1] + np.arange(BLOCK)
            on = self._first_on[:, None] ^ (j[None, :] % 2 == 1)
            lengths = self._gen.exponential(1.0, (self.n, BLOCK)) * np.where(on, c.online_seconds, c.offline_seconds)
            start = self._switch[:, -1:] if self._switch.shape[1] else np.zeros((self.n, 1))
            self._switch = np.concatenate([self._switch, start + np.cumsum(lengths, axis=1)], axis=1)

    def _switched(self, t: float) -> np.ndarray:
        """sessions: (n,) each node's switches at or before ``t``."""
        self._grow(t)
        return (self._switch <= t).sum(axis=1)

    def next_offline(self, t: float) -> np.ndarray:
        """(n,) the first time after ``t`` at which each node goes offline (inf: a node offline at
        ``t``, or one that never leaves; bernoulli looks at most :data:`HORIZON` slots ahead)."""
        c, on = self.cfg, self.online(t)
        out = np.full(self.n, np.inf)
        if c.model == "none" or not on.any():
            return out
        if c.model == "bernoulli":
            slot, todo = int(np.floor(t / c.period)), on.copy()
            for k in range(1, HORIZON + 1):
                off = todo & ~self.online((slot + k) * c.period)
                out[off], todo = (slot + k) * c.period, todo & ~off
                if not todo.any():
                    break
            return out
        if c.model == "diurnal":       # online while frac(t / day + phase) < availability
            frac = np.mod(t / c.day + self.phase, 1.0)
            out[on] = t + (c.availability - frac[on]) * c.day
            return out
        if c.model == "trace":         # the end of the session holding t (the latest end among those holding it)
            base = np.floor(t / self.finish) * self.finish
            tt = (t - base)[:, None]
            holding = (self.active <= tt) & (tt <= self.inactive)
            end = np.where(holding, self.inactive, -np.inf).max(axis=1)
            out[on] = (base + end)[on]
            return out
        k = self._switched(t)          # sessions: an online node's next switch turns it off
        idx = np.flatnonzero(on)
        out[idx] = self._switch[idx, k[idx]]
        return out

    def next_online(self, t: float) -> float:
        """The first time after ``t`` at which some node offline at ``t`` is online (inf: never)."""
        c, off = self.cfg, ~self.online(t)
        if not off.any():
            return t
        if c.model == "bernoulli":
            slot = int(np.floor(t / c.period))
            for k in range(1, 100_000):                                  # the next slot with anyone on
                if self.online((slot + k) * c.period).any():
                    return (slot + k) * c.period
            return np.inf
        if c.model == "diurnal":
            return float(t + (np.mod(-(t / c.day + self.phase[off]), 1.0) * c.day).min())
        if c.model == "trace":      # the next session start of an offline node, this period or the next
            base = (np.floor(t / self.finish) * self.finish)[off, None]
            starts = np.concatenate([base + self.active[off], base + self.finish[off, None] + self.active[off]], axis=1)
            later = np.where(starts > t, starts, np.inf)
            return float(later.min())
        k = self._switched(t)                                            # an offline node's next switch turns it on
        return float(self._switch[np.flatnonzero(off), k[off]].min())
