"""Messages in flight between nodes, in virtual seconds (issue 48).

A transfer carries ``size`` bytes from a sender to a receiver. Its bytes flow at a rate set by the
sharing policy over the sender's uplink and the receiver's downlink (bytes/s; ``inf``: no limit),
and it is delivered ``latency`` seconds after its last byte left (propagation after transmission:
a zero-byte message arrives after the latency alone). Policies:

- ``fair``: max-min fair sharing of every uplink and downlink by the transfers using it, found by
  progressive filling (all rates grow together; a link that fills freezes the transfers through it;
  the others keep growing). Rates change only when a transfer starts, ends or is aborted. Under it
  a k-regular synchronous round with uplink B and downlinks >= B sends k models of M bytes in
  k M / B seconds.
- ``fifo``: each sender's uplink carries one transfer at a time, in the order they were started
  (a sender's queue of messages); the transfers being carried share downlinks fairly.
- ``greedy``: sacs-epfl's simulator's scheduler (:mod:`.greedy`): first come, first allocated,
  never cut back; a transfer gains only from bandwidth its receiver frees. Not max-min fair.

:class:`Transfers` holds them as node-first arrays on the host; :mod:`.maxmin` shares the
links (incrementally, exactly); :meth:`Transfers.advance` moves every transfer's bytes to a later time;
:meth:`Transfers.next_done` says when the next one is delivered."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

POLICIES = ("fair", "fifo", "greedy")
_REL = 1e-12          # a link within this fraction of its capacity is full; bytes within it of 0 are sent


@dataclass
class Transfers:
    """The transfers in flight at time :attr:`now`: ``sender``, ``receiver``, ``size`` and ``left``
    (bytes, bytes not yet sent), ``latency`` (s), ``sent_at`` (when the last byte left; nan: still
    sending), ``tag`` (the caller's id of the message) and ``seq`` (the order they started in).
    ``uplink`` / ``downlink`` (n,) bytes/s."""

    uplink: np.ndarray
    downlink: np.ndarray
    policy: str = "fair"
    now: float = 0.0
    sender: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    receiver: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    size: np.ndarray = field(default_factory=lambda: np.zeros(0))
    left: np.ndarray = field(default_factory=lambda: np.zeros(0))
    latency: np.ndarray = field(default_factory=lambda: np.zeros(0))
    sent_at: np.ndarray = field(default_factory=lambda: np.zeros(0))
    tag: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    seq: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    begin: np.ndarray = field(default_factory=lambda: np.zeros(0))       # when each starts (<= now: started)
    counter: int = 0
    _rate: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)
    _carried: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool), repr=False)   # sharing the links
    _level0: float = field(default=np.inf, repr=False)   # rates below this level stand (:mod:`.maxmin`)
    _greedy: object = field(default=None, repr=False)    # greedy: the scheduler's state (:mod:`.greedy`)
    _gone: list = field(default_factory=list, repr=False)   # greedy: ids aborted since the last sharing
    _stale: bool = field(default=False, repr=False)      # the transfers changed since the rates were shared
    _seeds: list = field(default_factory=list, repr=False)   # links of the transfers removed while sharing

    FIELDS = ("sender", "receiver", "size", "left", "latency", "sent_at", "tag", "seq", "begin")

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {self.policy!r}")
        self.uplink, self.downlink = np.asarray(self.uplink, float), np.asarray(self.downlink, float)

    def start(self, sender, receiver, size, latency, tag) -> None:
        """New transfers at :attr:`now` (arrays, or scalars broadcast), in the order given."""
        self.schedule(self.now, sender, receiver, size, latency, tag)

    def schedule(self, at, sender, receiver, size, latency, tag) -> None:
        """New transfers starting at times ``at`` (a time before :attr:`now`: now), in the order
        given (at one time, the order they start in): a start ahead of now is an event of
        :meth:`run_until`'s compiled loop (fair and fifo; the step-by-step methods and ``greedy``
        take starts at now only, :meth:`start`)."""
        at, sender, receiver, size, latency, tag = (a.ravel() for a in np.broadcast_arrays(
            np.asarray(at, float), np.asarray(sender, np.int64), np.asarray(receiver, np.int64),
            np.asarray(size, float), np.asarray(latency, float), np.asarray(tag, np.int64)))
        if self.policy == "greedy" and (at > self.now).any():
            raise ValueError("the greedy policy starts transfers at now only (Transfers.start)")
        m = sender.size
        new = dict(sender=sender, receiver=receiver, size=size, left=size.copy(), latency=latency,
                   sent_at=np.full(m, np.nan), tag=tag, seq=self.counter + np.arange(m),
                   begin=np.maximum(at, self.now))
        for name in self.FIELDS:
            setattr(self, name, np.concatenate([getattr(self, name), new[name]]))
        self.counter += m
        self._rate = np.concatenate([self._rate, np.full(m, np.nan)])        # new: shared when next read
        self._carried = np.concatenate([self._carried, np.zeros(m, dtype=bool)])
        self._rates()

    def _rates(self) -> None:
        """Marks the transfers whose last byte has left; the rates are shared anew when next read
        (:attr:`rate`): a start, a removal and a step of :meth:`advance` at one time share once."""
        sending = np.isnan(self.sent_at) & (self.begin <= self.now)
        self.sent_at[sending & (self.left <= 0)] = self.now
        self._stale = True

    @property
    def rate(self) -> np.ndarray:
        """(T,) bytes/s of each transfer now: its share of its sender's uplink and receiver's
        downlink under the policy (0 once sent, and for one waiting in a FIFO queue)."""
        if self._stale:
            self._share()
        return self._rate

    def _share_greedy(self) -> None:
        """``greedy``: the transfers that finished sending or were aborted free their bandwidth,
        then the new ones are requested, in the order they started (:class:`~.greedy.Greedy`)."""
        from vecgossip.engines.clock.greedy import Greedy
        if self._greedy is None:
            self._greedy = Greedy(self.uplink, self.downlink)
        g, sending = self._greedy, np.isnan(self.sent_at)
        for fid in sorted(self._gone) + sorted(int(q) for q in self.seq[self._carried & ~sending]):
            g.done(fid)
        self._gone = []
        for k in np.flatnonzero(sending & ~self._carried):                   # in start order
            g.add(int(self.seq[k]), int(self.sender[k]), int(self.receiver[k]))
        # only the rates that changed (and new transfers') are read: ids increase with position
        ids = np.union1d(g.take_changed(), self.seq[np.isnan(self._rate)])
        pos = np.searchsorted(self.seq, ids)
        here = pos < self.seq.size
        here[here] = self.seq[pos[here]] == ids[here]
        self._rate[pos[here]] = [g.rate(int(q)) for q in ids[here]]
        self._rate *= sending
        self._carried, self._stale = sending, False

    def _share(self) -> None:
        """The rates after a change, incrementally (:mod:`.maxmin`): a flow that left the links
        (sent, removed) since the last sharing lowers the level from which rates can change to
        its rate; flows newly carried lower it to where they first fill a link; every rate below
        it stands, the rest are filled again from it."""
        from vecgossip.engines.clock.maxmin import entry_level, refill
        if self.policy == "greedy":
            return self._share_greedy()
        sending = np.isnan(self.sent_at) & (self.begin <= self.now)
        carried = sending.copy()
        if self.policy == "fifo" and sending.any():                   # each uplink: its oldest transfer
            idx = np.flatnonzero(sending)
            order = idx[np.lexsort((self.seq[idx], self.sender[idx]))]
            first = np.ones(order.size, dtype=bool)
            first[1:] = self.sender[order[1:]] != self.sender[order[:-1]]
            carried[:] = False
            carried[order[first]] = True
        left_links = self._carried & ~carried                      # stopped sharing: sent (or no longer first)
        level0 = min(self._level0, float(self._rate[left_links].min(initial=np.inf)))
        fresh = carried & (~self._carried | np.isnan(self._rate))
        self._rate[fresh] = np.nan
        n = max(self.uplink.size, self.downlink.size)
        up, down = self.sender, n + self.receiver
        cap = self._caps()
        if fresh.any():
            level0 = min(level0, entry_level(up, down, carried, self._rate, cap, fresh))
        if carried.any() and level0 < np.inf or fresh.any():
            refill(up, down, carried, self._rate, cap, level0)
        self._rate[~carried] = 0.0
        self._carried, self._level0, self._stale, self._seeds = carried, np.inf, False, []

    def _caps(self) -> np.ndarray:
        """(2n,) the uplinks' then the downlinks' capacities (bytes/s; inf: no limit)."""
        n = max(self.uplink.size, self.downlink.size)
        return np.concatenate([self.uplink, np.full(n - self.uplink.size, np.inf),
                               self.downlink, np.full(n - self.downlink.size, np.inf)])

    def _last_byte(self) -> np.ndarray:
        """(T,) when each transfer's last byte leaves at the current rates (inf: not carried now)."""
        out = np.where(np.isnan(self.sent_at), np.inf, self.sent_at)
        go = np.isnan(self.sent_at) & (self.rate > 0)
        out[go] = self.now + np.where(np.isinf(self.rate[go]), 0.0, self.left[go] / self.rate[go])
        return out

    def next_event(self) -> float:
        """The next time a transfer's last byte leaves (the rates change) or one is delivered (inf:
        none in flight)."""
        if not self.sender.size:
            return np.inf
        last = self._last_byte()
        sending = np.isnan(self.sent_at)
        ahead = self.begin[self.begin > self.now].min(initial=np.inf)
        return float(min(last[sending].min(initial=np.inf), (last + self.latency).min(), ahead))

    def advance(self, t: float) -> None:
        """Time moves to ``t``: each transfer's bytes flow at the rates of each interval between
        the events on the way (a transfer that finishes sending frees its share for the others)."""
        if t < self.now:
            raise ValueError(f"time runs forward: {t} < {self.now}")
        while True:
            last = self._last_byte()
            sending = np.isnan(self.sent_at)
            step = min(t, float(last[sending].min(initial=np.inf)),
                       float(self.begin[self.begin > self.now].min(initial=np.inf)))   # a start re-shares
            dt = step - self.now
            rate = self.rate
            moved = np.where(np.isinf(rate), self.left, np.where(np.isinf(rate), 0.0, rate) * dt)
            self.left = np.where(sending, self.left - moved, self.left)
            self.left[sending & (self.left <= _REL * self.size)] = 0.0     # rounding of now + left / rate
            self.left[sending & (last <= step)] = 0.0
            self.now = step
            self._rates()
            if step >= t:
                return

    def run_until(self, until: float, strict: bool) -> list[tuple[np.ndarray, np.ndarray, float, np.ndarray]]:
        """Every event up to ``until`` (strict: before it; else at it too, the time then
        ``until``), compiled as one loop (:mod:`.flow_kernel`; ``greedy``: step by step): the
        deliveries in order, as (receivers, tags, time, senders) per instant, taken out."""
        if self.policy == "greedy":
            return self._run_steps(until, strict)
        from vecgossip.engines.clock.flow_kernel import run_events
        n = max(self.uplink.size, self.downlink.size)
        now, idx, times = run_events(
            self.sender, self.receiver, self.size, self.left, self.latency, self.sent_at, self.seq, self.begin,
            self._rate, self._carried, self._caps(), n, self.policy == "fifo", self.now, float(until), bool(strict),
            self._level0, np.asarray(self._seeds, np.int64), _REL)
        self.now, self._stale, self._level0, self._seeds = float(now), False, np.inf, []
        out = []
        if idx.size:
            cut = np.flatnonzero(np.diff(times)) + 1
            for part in np.split(np.arange(idx.size), cut):
                k = idx[part]
                out.append((self.receiver[k].copy(), self.tag[k].copy(), float(times[part[0]]), self.sender[k].copy()))
            self.remove(idx)
        return out

    def _run_steps(self, until: float, strict: bool) -> list:
        """:meth:`run_until` step by step (``advance``, ``delivered``): the greedy policy's path."""
        out = []

        def collect():
            idx = self.delivered()
            if idx.size:
                out.append((self.receiver[idx].copy(), self.tag[idx].copy(), self.now, self.sender[idx].copy()))
                self.remove(idx)
        while True:
            nxt = self.next_event()
            if nxt > until or (strict and nxt >= until) or not np.isfinite(nxt):
                break
            self.advance(nxt)
            collect()
        if not strict and until > self.now:
            self.advance(until)
            collect()
        return out

    def delivered(self) -> np.ndarray:
        """Indices of the transfers delivered by :attr:`now` (sent, and their latency passed), in
        the order they started."""
        due = ~np.isnan(self.sent_at) & (self.sent_at + self.latency <= self.now + _REL * max(abs(self.now), 1.0))
        idx = np.flatnonzero(due)
        return idx[np.argsort(self.seq[idx], kind="stable")]

    def remove(self, which: np.ndarray) -> None:
        """Take transfers out (delivered, or aborted: a node went offline); the rest share anew
        when one of them was still sending (a delivered one had left its links already)."""
        keep = np.ones(self.sender.size, dtype=bool)
        keep[which] = False
        gone = ~keep & self._carried                                  # aborted while sharing the links
        if self.policy == "greedy":
            self._gone += [int(q) for q in self.seq[gone]]
        if gone.any():
            self._level0 = min(self._level0, float(self._rate[gone].min()))
            n = max(self.uplink.size, self.downlink.size)
            self._seeds += [*self.sender[gone].tolist(), *(n + self.receiver[gone]).tolist()]
            self._stale = True
        for name in self.FIELDS:
            setattr(self, name, getattr(self, name)[keep])
        self._rate, self._carried = self._rate[keep], self._carried[keep]

    def state(self) -> dict:
        """For a checkpoint: the transfers in flight, the time, the start counter and the rates
        as shared (incremental sharing: a resumed run goes on from the same bits)."""
        return {k: getattr(self, k).copy() for k in self.FIELDS} | {"now": self.now, "counter": self.counter,
                                                                     "rate": self._rate.copy(),
                                                                     "carried": self._carried.copy(),
                                                                     "level0": self._level0, "stale": self._stale,
                                                                     "seeds": list(self._seeds),
                                                                     "gone": list(self._gone),
                                                                     "greedy": None if self._greedy is None
                                                                     else self._greedy.state()}

    def load(self, d: dict) -> None:
        for k in self.FIELDS:
            if k == "begin" and k not in d:          # a checkpoint from before scheduled starts: all started
                self.begin = np.full(np.asarray(d["sender"]).size, -np.inf)
                continue
            setattr(self, k, np.asarray(d[k]).copy())
        self.now, self.counter, self._stale = float(d["now"]), int(d["counter"]), True
        self._rate, self._carried = np.full(self.sender.size, np.nan), np.zeros(self.sender.size, dtype=bool)
        if "rate" in d:            # the rates as shared (incrementally: their last bits depend on the history)
            self._rate, self._carried = np.array(d["rate"], float), np.array(d["carried"], bool)
            self._level0, self._stale = float(d["level0"]), bool(d["stale"])
            self._seeds = list(d.get("seeds", []))
            if "seeds" not in d and self._stale:     # an older checkpoint: the links of its removals unknown,
                self._carried[:] = False             # every transfer is shared anew (the same allocation)
        if d.get("greedy") is not None:
            from vecgossip.engines.clock.greedy import Greedy
            self._greedy = Greedy(self.uplink, self.downlink)
            self._greedy.load(d["greedy"])
            self._gone = list(d["gone"])

    def involving(self, nodes: np.ndarray) -> np.ndarray:
        """Indices of the transfers from or to any of ``nodes`` (to abort when they go offline)."""
        mask = np.zeros(max(self.uplink.size, self.downlink.size), dtype=bool)
        mask[nodes] = True
        return np.flatnonzero(mask[self.sender] | mask[self.receiver])
