"""Churn on a global barrier, message by message (issue 55): a node going offline during a round
is cut off there (its transfers aborted, :func:`~vecgossip.engines.clock.rounds.round_fates`), so
which messages a receiver averages depends on the times. The round engine mixes a gossip step
when the algorithm calls ``ctx.mix`` / ``ctx.gossip`` / ``ctx.gather``, so each step is timed
when it is sent, before it is mixed: :class:`StepTimer` times the step's messages so far (its
payloads summed per link, as :mod:`.outbox` counts them) and returns those that do not count;
the realization drops them as a lost message's weight is dropped (the algorithm's loss rule).

A second tensor sent at the same step adds bytes to the same messages; the fates already mixed
must not change, or the run stops in one line (send the step's tensors as one payload, or set
clock.churn.model=none). Steps are timed in order, the round's compute in the first; a read
(``ctx.neighbourhoods`` before the step is sent) sees the messages as attempted."""
from __future__ import annotations

import numpy as np

from vecgossip.core.errors import ConfigError


class StepTimer:
    """The gossip steps of the current round, timed as they are sent (``timer``: the run's
    :class:`~vecgossip.engines.clock.rounds.RoundTimer` with churn)."""

    def __init__(self, timer, m: int) -> None:
        self.timer, self.m = timer, m
        self.begin(np.zeros(m))

    def begin(self, steps: np.ndarray) -> None:
        """A round whose participants take ``steps`` (m,) local steps."""
        self.steps, self.first = np.asarray(steps, float), True
        self.current: int | None = None
        self.tentative: tuple | None = None          # (sender, receiver, size, key, counted) of the current step

    def lost(self, step: int, sender: np.ndarray, receiver: np.ndarray, size: np.ndarray, who: str) -> np.ndarray:
        """The keys (receiver * m + sender) of the messages of ``step`` so far that do not count
        (cut off by a node leaving); ``who``: the method, for the one-line error."""
        if self.current is not None and step != self.current:
            if step < self.current:
                raise ConfigError(f"method {who}: sends gossip step {step} after step {self.current} under "
                                  "clock.churn (steps are timed in order)")
            self.commit()
        self.current = step
        out, _ = self.timer.fates(self.steps if self.first else np.zeros(self.m), sender, receiver, size)
        key = receiver * self.m + sender
        if self.tentative is not None:
            old_key, old_counted = self.tentative[3], self.tentative[4]
            order = np.argsort(key, kind="stable")              # the step's links only grow
            idx = order[np.searchsorted(key[order], old_key)]
            if not np.array_equal(out.counted[idx], old_counted):
                raise ConfigError(f"method {who}: a second tensor at gossip step {step} changes which messages "
                                  "arrive before a node leaves (clock.churn): send the step's tensors as one payload")
        self.tentative = (sender, receiver, size, key, out.counted)
        return key[~out.counted]

    def commit(self) -> None:
        """The current step's messages are final: the clock moves over them."""
        if self.tentative is None:
            return
        s, r, size = self.tentative[:3]
        self.timer.phase(self.steps if self.first else np.zeros(self.m), s, r, size)
        self.first, self.tentative = False, None

    def finish(self) -> None:
        """The round's end: its last step committed (a round without messages: its compute)."""
        self.commit()
        if self.first:
            self.timer.phase(self.steps, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))
        self.timer.end_round()
