"""The tick engine's timed messages (issues 48, 55): in virtual seconds every message an algorithm
sends is (sender, receiver, bytes, what it carries, send time), in flight until the transfers
deliver it.

- A node's fresh model is snapshotted when it is sent (the model sent is the model at its send
  time, so staleness is exact) and its messages start at that time: their bytes through the
  sender's uplink and the receiver's downlink, shared by the policy, plus the pair's latency
  (:class:`~vecgossip.engines.clock.transfers.Transfers`, exact event times);
- in each window (:mod:`.windows`), in this order: the due nodes train (one batched step), the
  messages delivered before the window's end go into their receivers' inboxes, the algorithm
  merges: everything within one window runs as one batched wave at the window's time, the stated
  approximation (``clock.resolution`` -> 0 resolves every event);
- churn: a message to a node offline when it would start is never started (counted as lost, not
  as bytes sent), and every transfer from or to a node offline at a window's start is lost there
  (aborted in flight).

Zero latency, unlimited bandwidth and c_i = T_acq x r put every event on the tick engine's ticks:
the recording is the tick engine's, bit for bit (tests/test_clock_tick.py). Windows with no event
are skipped.

Sharded (torchrun): the transfers run on every rank over all nodes' messages (host arrays, the
same events everywhere); a wave's snapshot holds the models this rank's receivers will get,
fetched from their owners at the send (:meth:`TimedTransport.snapshot`), and each rank receives
into its own inboxes (:meth:`TimedTransport.receive_here`, part sums, latest per link); paired
messages mix the pair's rows across ranks and each rank applies its own requesters' gradients:
the one process's outputs, byte for byte (tests/test_distributed.py)."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from vecgossip.core.device import upload
from vecgossip.engines.clock.transfers import Transfers
from vecgossip.engines.tick.schedule import NEVER
from vecgossip.engines.tick.timed.latest import LatestInbox
from vecgossip.engines.tick.timed.pairs import PAIRED, PairedMessages
from vecgossip.engines.tick.timed.parts import PartsInbox
from vecgossip.engines.tick.timed.windows import Seconds, SecondsSchedule
from vecgossip.engines.tick.transport import Transport
from vecgossip.network.mixing import link_list, to_torch_csr


class TimedTransport(PartsInbox, LatestInbox, PairedMessages, Transport):
    """Step 2 in seconds: each sent model becomes one message per link, in flight until the
    transfers deliver it; each window's deliveries go into the receivers' inboxes as one batched
    receive per send wave: Eq. 1's buffers (whole models, :class:`~..transport.Transport`), the
    sums of parameter subsets (:class:`~.parts.PartsInbox`), the latest model per link
    (:class:`~.latest.LatestInbox`); paired messages (:class:`~.pairs.PairedMessages`) complete
    a request and its reply. ``message_bytes``: one whole model's message. Instant links (no
    latency, no limit) take the tick engine's own send."""

    def __init__(self, *args, clock: Seconds, schedule: SecondsSchedule, message_bytes: float, **kw) -> None:
        super().__init__(*args, **kw)
        self.clock, self.schedule, self.message_bytes = clock, schedule, float(message_bytes)
        self.flow = Transfers(clock.uplink, clock.downlink, clock.policy)
        self.snaps: dict[int, list] = {}        # send wave id -> [models (M, P), send times (M,), messages in flight (M,),
                                                #   part ids (M, P) int8 or None (whole models)]
        self.wave = 0                           # the next send wave's id
        self.arrived: list[tuple] = []          # (receivers, tags, time, senders), not yet received
        n = self.n                              # host arrays cover every node (on every rank when sharded)
        self.bytes_sent = np.zeros(n)           # per sender
        self.received = np.zeros(n)             # messages per receiver
        self.staleness = np.zeros(n)            # per receiver: sum of (arrival - send) seconds
        self.aborted = 0                        # churn: messages lost to a node offline (at start or in flight)
        self.here: dict[int, np.ndarray] = {}   # sharded: send wave -> each sender's row in the rank's snapshot (-1)
        self.keep_arrivals = False              # the algorithm reads ctx.arrivals: log every delivered message
        self.log: list[np.ndarray] = []         # (4, A) blocks: receiver, sender, send time, arrival time
        self.init_parts(n)
        self.init_latest()
        self.init_pairs()
        schedule.arrivals = self.next_window

    def tag(self, wave, row, part=0):
        """A message's transfer tag: its send wave, its row in the wave's snapshot, its part."""
        return (np.asarray(wave) * self.n + row) * self.parts + part

    def untag(self, tag: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(wave, row, part) of each tag."""
        base, part = np.divmod(tag, self.parts)
        wave, row = np.divmod(base, self.n)
        return wave, row, part

    def next_window(self) -> int:
        """The window of the next transfer event (a delivery, or a last byte leaving)."""
        nxt = self.flow.next_event()
        return int(self.clock.window(nxt)) if np.isfinite(nxt) else NEVER

    def send(self, senders: np.ndarray, online: np.ndarray | None = None, t: int = 0) -> None:
        """The ``senders``' fresh models leave at their steps' completion times; every message
        delivered before window t ends goes into its receiver's buffer."""
        if self.clock.instant and self.latest is None:
            if senders.size:
                recv, send = link_list(self.wiring.a_full, senders)
                self.bytes_sent += np.bincount(send, minlength=self.n) * self.message_bytes
                self.received += np.bincount(recv, minlength=self.n)
                super().send(senders, online, t)
                at = self.schedule.sent_at[send]
                self.note_arrivals(recv, send, at, at)          # instant links: arrival = send
            return
        end = (t + 1) * self.clock.resolution
        if online is None:
            online = self.schedule.online          # churn: read at this window's start (None: everyone)
        if online is not None:
            self.abort(np.flatnonzero(~online))
        if senders.size:
            self.start(senders, online)
        self.run_until(end, strict=True)
        self.receive_arrived()

    def mine(self, nodes: np.ndarray) -> np.ndarray:
        """Which of the global ``nodes`` (any order) are this process's rows (all in one process)."""
        return self.shard.owner(nodes) == self.shard.rank

    def start(self, senders: np.ndarray, online: np.ndarray | None = None) -> None:
        recv, send = link_list(self.wiring.a_full, senders)
        order = np.lexsort((recv, send))                     # (sender, receiver) order
        recv, send = recv[order], send[order]
        if online is not None:                               # to an offline receiver: never started
            self.aborted += int((~online[recv]).sum())
            recv, send = recv[online[recv]], send[online[recv]]
        if not recv.size:
            return
        times = self.schedule.sent_at[senders]
        wave = self.wave
        self.wave += 1
        row = np.searchsorted(senders, send)
        self.snaps[wave] = [self.snapshot(wave, senders, recv, row), times.copy(),
                            np.bincount(row, minlength=senders.size), None]
        tag = self.tag(wave, row)
        self.begin(times[row], send, recv, self.message_bytes, tag)
        self.bytes_sent += np.bincount(send, minlength=self.n) * self.message_bytes

    def begin(self, at: np.ndarray, send: np.ndarray, recv: np.ndarray, size, tag: np.ndarray) -> None:
        """Messages ``send`` -> ``recv`` starting at times ``at`` (a time before the transfers'
        clock: at it), in time order, at one time in the order given: scheduled as events of the
        compiled loop (greedy: started one time after another, the deliveries before each
        collected)."""
        if self.flow.policy != "greedy":
            order = np.argsort(at, kind="stable")
            s, r = send[order], recv[order]
            self.flow.schedule(at[order], s, r, np.broadcast_to(size, at.shape)[order], self.clock.latency[s, r],
                               tag[order])
            return
        for tau in np.unique(at):
            self.run_until(max(float(tau), self.flow.now), strict=False)
            go = at == tau
            s, r = send[go], recv[go]
            self.flow.start(s, r, np.broadcast_to(size, at.shape)[go], self.clock.latency[s, r], tag[go])
            self.collect()

    def snapshot(self, wave: int, senders: np.ndarray, recv: np.ndarray, row: np.ndarray) -> torch.Tensor:
        """The sorted ``senders``' models at their send (the messages ``row`` -> ``recv`` start):
        one process, their rows. Sharded, the rows this rank's receivers will get, fetched now
        from their owners (all_to_all: only those; all_gather: every sender's), and
        :attr:`here` [wave] maps each sender to its row in them."""
        if not self.shard.sharded:
            return self.state.theta.index_select(0, upload(senders, self.device))     # a new tensor (a copy)
        got, cols = self.fetch(senders, False, (recv, row))       # new tensors: gathered or all-to-all rows
        self.here[wave] = np.full(senders.size, -1, dtype=np.int64)
        self.here[wave][np.searchsorted(senders, cols)] = np.arange(got.shape[0])
        return got

    def run_until(self, until: float, strict: bool) -> None:
        """Transfers advance to ``until`` (strict: every event before it; else up to and at it,
        the clock then at ``until``), their deliveries collected in order."""
        self.arrived += self.flow.run_until(until, strict)       # compiled: every event up to until

    def collect(self) -> None:
        idx = self.flow.delivered()
        if idx.size:
            self.arrived.append((self.flow.receiver[idx].copy(), self.flow.tag[idx].copy(), self.flow.now,
                                 self.flow.sender[idx].copy()))
            self.flow.remove(idx)

    def receive_arrived(self) -> None:
        """This window's deliveries into the buffers: one receive per send wave, in wave order."""
        if not self.arrived:
            return
        n = self.n
        recv = np.concatenate([a[0] for a in self.arrived])
        tag = np.concatenate([a[1] for a in self.arrived])
        when = np.concatenate([np.full(a[0].size, a[2]) for a in self.arrived])
        sender = np.concatenate([a[3] for a in self.arrived])
        self.arrived = []
        wave, row, part = self.untag(tag)
        for w in np.unique(wave):
            pick = wave == w
            r, j = recv[pick], row[pick]
            snap, times, _, ids = self.snaps[int(w)]
            np.add.at(self.staleness, r, when[pick] - times[j])
            self.received += np.bincount(r, minlength=n)
            self.note_arrivals(r, sender[pick], times[j], when[pick])
            if ids is not None:
                weights = self.message_weights(j, when[pick] - times[j], self.weights.get(int(w)))
                self.parts_in(r, j, part[pick], snap, ids, self.part_sizes[int(w)], weights,
                                  self.here.get(int(w)))
            elif self.latest is not None:
                self.latest_in(r, j, sender[pick], snap, times, self.here.get(int(w)))
            else:                                # sharded: the senders' rows in this rank's snapshot
                self.receive_here(r, j if int(w) not in self.here else self.here[int(w)][j], snap)
        self.release(wave, row)

    def note_arrivals(self, receiver: np.ndarray, sender: np.ndarray, sent: np.ndarray, arrived: np.ndarray) -> None:
        """Log delivered messages for :meth:`arrivals` (only when the algorithm reads them)."""
        if self.keep_arrivals and receiver.size:
            self.log.append(np.stack([receiver, sender, sent, arrived]).astype(np.float64))

    def arrivals(self, nodes: np.ndarray) -> dict[str, np.ndarray]:
        """The messages delivered to ``nodes`` (global) since their last call, in delivery order:
        ``receiver``, ``sender`` (int64), ``sent``, ``arrived`` (seconds); they leave the log. The
        log is host arrays over all nodes, the same on every rank."""
        log = np.concatenate(self.log, axis=1) if self.log else np.zeros((4, 0))
        mine = np.isin(log[0], nodes)
        self.log = [log[:, ~mine]] if (~mine).any() else []
        got = log[:, mine]
        return {"receiver": got[0].astype(np.int64), "sender": got[1].astype(np.int64), "sent": got[2],
                "arrived": got[3]}

    def receive_here(self, r: np.ndarray, j: np.ndarray, snap: torch.Tensor) -> None:
        """One send wave's whole models (``r`` global receivers of ALL ranks, ``j`` their senders'
        rows in this rank's snapshot) into this rank's buffers; under compression the sender's
        snapshot where sent, the receiver's model now elsewhere, each message's mask keyed by its
        place among all ranks' (the one-process order: the same draws)."""
        sh, m = self.shard, self.state.n
        mine = self.mine(r)
        if self.compression < 1.0:
            self.buffers.receive_compressed(np.where(mine, r - sh.lo, 0), np.where(mine, j, 0), self.state.theta,
                                            self.compression, self.layout, self.gen, self.rng, self.variances,
                                            src=snap, mine=mine)
            return
        r, j = r[mine] - sh.lo, j[mine]
        a = sp.coo_matrix((np.ones(r.size), (r, j)), shape=(m, snap.shape[0]))
        self.buffers.receive(to_torch_csr(a, self.device, snap.dtype), np.bincount(r, minlength=m).astype(np.float64),
                             snap, self.layout, self.variances)

    def release(self, wave: np.ndarray, row: np.ndarray) -> None:
        """Messages of send waves ``wave`` rows ``row`` no longer in flight (lost)."""
        for w in np.unique(wave):
            left = self.snaps[int(w)][2]
            left -= np.bincount(row[wave == w], minlength=left.size)
            if not left.any():
                del self.snaps[int(w)]
                self.here.pop(int(w), None)
                self.weights.pop(int(w), None)
                self.part_sizes.pop(int(w), None)
            elif (left == 0).sum() * 2 > left.size:
                self.compact(int(w))

    def compact(self, w: int) -> None:
        """Send wave ``w``'s snapshot keeps only the models still in flight (a slow uplink must not
        hold a whole wave's models): its rows renumbered, in the transfers' tags too."""
        snap, times, left, ids = self.snaps[w]
        keep = np.flatnonzero(left > 0)
        new = np.full(left.size, -1, dtype=np.int64)
        new[keep] = np.arange(keep.size)
        wave, row, part = self.untag(self.flow.tag)
        mine = wave == w
        self.flow.tag[mine] = self.tag(w, new[row[mine]], part[mine])
        rows = keep
        if w in self.here:                      # sharded: the kept senders' rows held here, renumbered
            pos = self.here[w][keep]
            rows = pos[pos >= 0]
            self.here[w] = np.where(pos >= 0, np.cumsum(pos >= 0) - 1, -1)
        at = upload(rows, self.device)
        self.snaps[w] = [snap[at], times[keep], left[keep], None if ids is None else ids[upload(keep, self.device)]]
        if w in self.weights:
            self.weights[w] = self.weights[w][keep]
        if w in self.part_sizes:
            self.part_sizes[w] = self.part_sizes[w][keep]

    def abort(self, offline: np.ndarray) -> None:
        """Churn: every transfer from or to a node offline at this window's start is lost (its
        bytes so far wasted; its snapshot row released)."""
        if not offline.size or not self.flow.sender.size:
            return
        self.run_until(self.schedule.now * self.clock.resolution, strict=False)  # to the window's start
        gone = self.flow.involving(offline)
        if not gone.size:
            return
        tags = self.flow.tag[gone].copy()
        self.flow.remove(gone)
        self.aborted += gone.size
        ex = tags >= PAIRED                   # paired messages: their pairs are cut (:meth:`cut_offline`)
        if ex.any():
            self.cut_pairs = np.union1d(self.cut_pairs, (tags[ex] - PAIRED) // 2)
        if not ex.all():
            wave, row, _ = self.untag(tags[~ex])
            self.release(wave, row)

    def state_dict(self) -> dict:
        return {"flow": self.flow.state(),
                "snaps": {k: [v[0], v[1].copy(), v[2].copy(), v[3]] for k, v in self.snaps.items()}, "wave": self.wave,
                "here": {k: v.copy() for k, v in self.here.items()},
                "bytes_sent": self.bytes_sent.copy(), "received": self.received.copy(),
                "staleness": self.staleness.copy(), "aborted": self.aborted,
                "arrivals": np.concatenate(self.log, axis=1) if self.log else np.zeros((4, 0)),
                **self.parts_state(), **self.latest_state(), **self.pairs_state()}

    def load_state_dict(self, d: dict) -> None:
        self.flow.load(d["flow"])
        self.snaps = {int(k): [v[0].to(self.device), np.asarray(v[1]), np.asarray(v[2]),
                               None if v[3] is None else v[3].to(self.device)] for k, v in d["snaps"].items()}
        self.here = {int(k): np.asarray(v).copy() for k, v in d.get("here", {}).items()}
        self.wave = int(d["wave"])
        self.bytes_sent[:], self.received[:], self.staleness[:] = d["bytes_sent"], d["received"], d["staleness"]
        self.aborted = int(d["aborted"])
        kept = np.asarray(d.get("arrivals", np.zeros((4, 0))), dtype=np.float64)
        self.log = [kept] if kept.shape[1] else []
        self.load_parts(d)
        self.load_latest(d)
        self.load_pairs(d)
        self.arrived = []
