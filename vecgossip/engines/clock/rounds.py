"""Synchronous rounds in virtual seconds (issue 48): how long each of the round engine's rounds
takes under the clock's compute, links and sharing policy, for the algorithms whose round is
"local work, then one message per edge of W_t, then everyone waits for the slowest" (D-PSGD and
the DFL family of paper 2, Shi et al. 2023, Algorithm 1: a global barrier per round).

Within a round starting at 0: node i computes for ``steps_i x c_i`` seconds (its local steps this
round, 0 when it does not take part, times its seconds per step, :mod:`.compute`), then starts
its messages, one per out-edge j <- i of W_t (``size`` bytes each: what the algorithm sent),
shared over the uplinks and downlinks by the policy (:mod:`.transfers`) and delivered a latency
later (:mod:`.links`). The round ends when every node has finished computing and every message
has arrived (the barrier); its duration is the clock's advance. Learning does not depend on time
here (every node averages exactly the round's messages), so the round engine's models are those
of the untimed run: the clock adds the seconds beside them.

Per node and round: ``busy`` = its compute, ``idle`` = the round's duration minus its compute
(sending and waiting at the barrier). A homogeneous k-regular round (compute c, uplinks B, no
latency, fair sharing) takes c + k M / B (tests/test_clock_parts.py)."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np



def synchronous_round(compute: np.ndarray, sender: np.ndarray, receiver: np.ndarray, size: np.ndarray,
                      uplink: np.ndarray, downlink: np.ndarray, latency: np.ndarray,
                      policy: str = "fair") -> tuple[float, np.ndarray]:
    """(duration, done (n,)): one barrier round from time 0. ``compute`` (n,) seconds of local work;
    the messages ``sender[e] -> receiver[e]`` of ``size[e]`` bytes start when their sender's
    compute ends (in edge order at equal times: the order FIFO uplinks serve them in); ``latency`` (n, n) seconds, row = sender.
    ``done[i]``: when node i has computed and received all its messages."""
    out = round_fates(compute, sender, receiver, size, uplink, downlink, latency, policy)
    return out.end, out.done


def round_fates(compute: np.ndarray, sender: np.ndarray, receiver: np.ndarray, size: np.ndarray,
                uplink: np.ndarray, downlink: np.ndarray, latency: np.ndarray, policy: str = "fair",
                leave: np.ndarray | None = None) -> "Fates":
    """:func:`synchronous_round` with nodes that go offline during it (churn): node i leaves at
    ``leave[i]`` seconds after the round's start (inf: stays). Leaving before it has finished its
    part (computed, its messages arrived, those it waits for arrived), it stops: a message it has
    not started is not sent, its transfers in flight (sent or received) are aborted there, and it
    does not finish the round (it keeps its own model; ``gone``); leaving after, it has its new
    model and the round goes on without it. At one instant: deliveries, then leaving, then sends. Returns (duration, done, arrived (E,):
    the message's last byte arrived, counted (E,): it arrived and its receiver stayed to the
    round's end: what the receiver averages). The duration is the last staying node's done or
    the last leave of a node cut off, whichever is later (the barrier waits for a node until it
    has finished or left). The event loop is compiled as a whole (:mod:`.round_kernel`)."""
    from vecgossip.engines.clock.round_kernel import run_round
    n = compute.size
    sender, receiver, size = np.asarray(sender, np.int64), np.asarray(receiver, np.int64), np.asarray(size, float)
    leave = np.full(n, np.inf) if leave is None else np.asarray(leave, float)
    if policy == "greedy":
        from vecgossip.engines.clock.event_round import transfers_round
        return Fates(*transfers_round(compute, sender, receiver, size, uplink, downlink, latency, policy, leave))
    if policy not in ("fair", "fifo"):
        raise ValueError(f"policy must be fair, fifo or greedy, got {policy!r}")
    end, done, arrived, gone = run_round(np.asarray(compute, float), leave, sender, receiver, size,
                                         pair_latency(latency, sender, receiver),
                                         np.asarray(uplink, float), np.asarray(downlink, float), policy == "fifo")
    return Fates(float(end), done, arrived, arrived & ~gone[receiver], gone)


def pair_latency(latency, sender: np.ndarray, receiver: np.ndarray) -> np.ndarray:
    """Seconds from each sender to its receiver: ``latency`` a :class:`~.links.Latency` or an
    (n, n) array-like (row = sender)."""
    from vecgossip.engines.clock.links import Latency
    lat = latency if isinstance(latency, Latency) else np.asarray(latency, float)
    return np.asarray(lat[sender, receiver], float)


class Fates(NamedTuple):
    """A barrier round's outcome (:func:`round_fates`)."""

    end: float               # its duration
    done: np.ndarray         # (n,) when each node finished its part
    arrived: np.ndarray      # (E,) the message's last byte arrived
    counted: np.ndarray      # (E,) it arrived and its receiver finished the round
    gone: np.ndarray         # (n,) cut off: left before finishing its part


def messages(w) -> tuple[np.ndarray, np.ndarray]:
    """(sender, receiver) of the messages of mixing matrix ``w`` (scipy, receiver-by-sender:
    W_ij != 0, i != j, is a message j -> i), by sender, then receiver."""
    coo = w.tocoo()
    off = coo.row != coo.col
    order = np.lexsort((coo.row[off], coo.col[off]))
    return coo.col[off][order].astype(np.int64), coo.row[off][order].astype(np.int64)


class RoundTimer:
    """The virtual clock of one round-engine run: the node speeds and links drawn once from the
    run's seed, then :meth:`round` per round. ``seconds``: the time at the end of the last round;
    ``busy`` / ``idle`` (n,): each node's seconds computing / not computing so far; ``bytes_sent``
    (n,): each node's messages' bytes so far."""

    def __init__(self, step_seconds: np.ndarray, uplink: np.ndarray, downlink: np.ndarray, latency: np.ndarray,
                 policy: str = "fair", churn=None) -> None:
        self.step_seconds, self.uplink, self.downlink, self.latency = step_seconds, uplink, downlink, latency
        self.policy = policy
        self.churn = churn                  # :class:`~.churn.Churn` or None (everyone online)
        self.n = step_seconds.size
        self.seconds = 0.0
        self.busy = np.zeros(self.n)
        self.idle = np.zeros(self.n)
        self.bytes_sent = np.zeros(self.n)   # per node: its messages' bytes so far
        self.server: tuple[float, float] | None = None   # a server's (bytes/s both ways, latency s): timed FL
        self.server_bytes = 0.0              # the server's messages' bytes so far
        self.dispatch_rng: np.random.Generator | None = None   # the asynchronous server's draws
        self.dispatcher = None               # :class:`~.dispatch.Dispatcher` once an algorithm asks for it
        self._dispatch_state: dict | None = None   # a checkpoint's, until the dispatcher is made
        self.cut = np.zeros(self.n, dtype=bool)     # churn: left during this round before finishing a phase

    def round(self, steps: np.ndarray, w, message_bytes: float) -> float:
        """One phase whose messages are those of mixing matrix ``w`` (scipy, receiver-by-sender:
        W_ij != 0, i != j, is a message j -> i), each ``message_bytes`` bytes: :meth:`phase`."""
        sender, receiver = messages(w)
        return self.phase(steps, sender, receiver, np.full(sender.size, float(message_bytes)))

    def phase(self, steps: np.ndarray, sender: np.ndarray, receiver: np.ndarray, size: np.ndarray) -> float:
        """One phase of a round: ``steps`` (n,) local steps each node took, then the messages
        ``sender[e] -> receiver[e]`` of ``size[e]`` bytes each (in the order FIFO uplinks serve
        them); under churn a node going offline during it is cut off (:func:`round_fates`) and
        stays cut off for the rest of the round (:attr:`cut`). Returns the phase's duration
        (and advances :attr:`seconds`); the bytes counted are those of the messages that arrived."""
        out, compute = self.fates(steps, sender, receiver, size)
        busy = np.minimum(compute, np.where(out.gone, out.done, np.inf))
        self.bytes_sent += np.bincount(np.asarray(sender, np.int64)[out.arrived],
                                       weights=np.asarray(size, float)[out.arrived], minlength=self.n)
        self.busy += busy
        self.seconds += out.end
        self.idle += out.end - busy
        self.cut |= out.gone
        return out.end

    def fates(self, steps: np.ndarray, sender: np.ndarray, receiver: np.ndarray, size: np.ndarray):
        """(:class:`Fates`, compute (n,)) of a phase starting now, without moving the clock."""
        compute = np.asarray(steps, float) * self.step_seconds
        leave = None
        if self.churn is not None:
            leave = np.where(self.cut, 0.0, self.leave_times() - self.seconds)
        return round_fates(compute, sender, receiver, size, self.uplink, self.downlink, self.latency, self.policy,
                           leave), compute

    def server_round(self, steps: np.ndarray, clients: np.ndarray, down: float, up: float) -> np.ndarray:
        """A round through the server (:func:`~.server.server_round`): ``clients`` download
        ``down`` bytes, take their ``steps`` local steps, upload ``up`` bytes; a client that goes
        offline before its upload arrives (churn) is cut off. Returns (n,) whose upload arrived."""
        from vecgossip.engines.clock.server import server_round
        rate, lat = self.server
        compute = np.asarray(steps, float) * self.step_seconds
        duration, arrived, _, busy, fetched = server_round(compute, clients, down, up, np.append(self.uplink, rate),
                                                  np.append(self.downlink, rate), lat, self.policy,
                                                           self.leave_times() - self.seconds)
        self.seconds += duration
        self.busy += busy
        self.idle += duration - busy
        self.bytes_sent[arrived] += up
        self.server_bytes += down * int(fetched.sum())
        return arrived

    def asynchronous(self, compute: np.ndarray, size: float, concurrency: int, buffer: int):
        """The asynchronous server's next ``buffer`` uploads (:class:`~.dispatch.Dispatcher`,
        made at the first call): (clients dispatched at the current version, arrived clients in
        order, their versions, downloads delivered). Time moves to the last arrival; each arrived
        client's work counts as busy, its upload as its bytes, the downloads as the server's."""
        from vecgossip.engines.clock.dispatch import Dispatcher
        if self.churn is not None:
            raise ValueError("an asynchronous server with clock.churn is not timed so far")
        if self.dispatcher is None:
            rate, lat = self.server
            self.dispatcher = Dispatcher(compute, np.append(self.uplink, rate), np.append(self.downlink, rate), lat,
                                         self.policy, size, concurrency, self.dispatch_rng)
            if self._dispatch_state is not None:
                self.dispatcher.load(self._dispatch_state)
        d = self.dispatcher
        trains, arrived, versions = d.round(buffer)
        self.seconds = d.now
        np.add.at(self.busy, arrived, compute[arrived])
        self.idle = self.seconds - self.busy
        np.add.at(self.bytes_sent, arrived, size)
        self.server_bytes += size * d.downloads
        return trains, arrived, versions, d.downloads

    def leave_times(self) -> np.ndarray:
        """(n,) when each node goes offline after :attr:`seconds` (churn; inf: stays online, and
        for everyone without churn)."""
        return np.full(self.n, np.inf) if self.churn is None else self.churn.next_offline(self.seconds)

    def account(self, steps: np.ndarray, sender: np.ndarray, size: np.ndarray) -> np.ndarray:
        """A phase's (n,) seconds of compute, its messages' bytes counted into :attr:`bytes_sent`
        (per sender) and the compute into :attr:`busy` (under either barrier)."""
        self.bytes_sent += np.bincount(np.asarray(sender, np.int64), weights=np.asarray(size, float),
                                       minlength=self.n)
        compute = np.asarray(steps, float) * self.step_seconds
        self.busy += compute
        return compute

    def end_round(self) -> None:
        """After a round's :meth:`round` calls (its gossip steps): nobody is cut off any more
        (:class:`~.barrier.NodeBarrier` runs its events here)."""
        self.cut[:] = False

    def row(self, rounds: int) -> dict:
        """The metrics row's clock columns after ``rounds`` rounds: the time and the mean idle
        seconds (:class:`~.barrier.NodeBarrier`: nan until every node has finished them)."""
        return {"seconds": self.seconds, "idle_seconds_mean": float(self.idle.mean())}

    def fill(self, rows: list[dict]) -> list[int]:
        """Rows measured before their time was known get it; returns their indices (none here:
        a global barrier's round ends when it is measured)."""
        return []

    def drain(self) -> None:
        """The run's last round is done: finish what is in flight (nothing under a global barrier)."""

    def online(self) -> np.ndarray:
        """(n,) who is online at the current time (churn; everyone without)."""
        return np.ones(self.n, dtype=bool) if self.churn is None else self.churn.online(self.seconds)

    def wait_for_someone(self) -> float:
        """A round in which nobody was online: the clock moves to when the next node comes back
        (the seconds waited, counted as everyone's idle time)."""
        if self.churn is None:
            return 0.0
        nxt = self.churn.next_online(self.seconds)
        if not np.isfinite(nxt):
            raise RuntimeError(f"clock.churn: nobody is online at {self.seconds:.1f} s or ever after")
        waited = nxt - self.seconds
        self.seconds = nxt
        self.idle += waited
        return waited

    def state(self) -> dict:
        return {"seconds": self.seconds, "busy": self.busy.copy(), "idle": self.idle.copy(),
                "bytes_sent": self.bytes_sent.copy(), "server_bytes": self.server_bytes,
                "dispatch": None if self.dispatcher is None else self.dispatcher.state()}

    def load(self, d: dict) -> None:
        self.seconds, self.busy, self.idle = float(d["seconds"]), np.array(d["busy"]), np.array(d["idle"])
        self.bytes_sent = np.array(d["bytes_sent"])
        self.server_bytes = float(d.get("server_bytes", 0.0))          # (a checkpoint from before timed FL: 0)
        self._dispatch_state = d.get("dispatch")
        if self.dispatcher is not None and self._dispatch_state is not None:
            self.dispatcher.load(self._dispatch_state)
