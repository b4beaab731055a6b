"""The tick engine in virtual seconds (issue 48): gossip learning (paper section III-A,
Algorithm 2) where each node's step takes its own compute time and each model its transfer time.

With ``clock.enabled=true`` a tick is a window of ``clock.resolution`` seconds, [t r, (t + 1) r):

- node i's steps complete at 0, c_i, 2 c_i, ... (c_i its seconds per step, :mod:`~vecgossip.engines.
  clock.compute`; all train at 0, the tick engine's convention), each computed exactly as
  ``k x c_i`` (no accumulated rounding), and a step runs in the window its completion time falls in;
- its fresh model is snapshotted (the model sent is the model at its send time, so staleness is
  exact) and one message per link starts at that time: ``message_bytes`` bytes through the
  sender's uplink and the receiver's downlink, shared by the policy, plus the pair's latency
  (:class:`~vecgossip.engines.clock.transfers.Transfers`, exact event times);
- in each window, in this order: the due nodes train (one batched step), the messages delivered
  before the window's end go into their receivers' buffers, the full buffers merge (Eq. 1, +
  Algorithm 3): everything within one window runs as one batched wave at the window's time,
  the stated approximation (``clock.resolution`` -> 0 resolves every event);
- churn (``clock.churn``) is read at every window's start: an offline node's step slot passes
  untrained, a message to a node offline when it would start is never started, and every
  transfer from or to a node offline at a window's start is lost there (aborted in flight).

Zero latency, unlimited bandwidth and c_i = T_acq x r put every event on the tick engine's ticks:
the recording is the tick engine's, bit for bit (tests/test_clock_tick.py). Windows with no event
are skipped.

Sharded (torchrun): the transfers run on every rank over all nodes' messages (host arrays, the
same events everywhere); a wave's snapshot holds the models this rank's receivers will get,
fetched from their owners at the send (:meth:`TimedTransport.snapshot`), and each rank receives
into its own buffers (:meth:`TimedTransport.receive_here`), fragment sums or caches; AD-PSGD's
averages mix the pair's rows across ranks (``ctx.mix``) and each rank applies its own
initiators' gradients: the one process's outputs, byte for byte (tests/test_distributed.py)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp
import torch

from vecgossip.core.device import upload
from vecgossip.engines.clock.transfers import Transfers
from vecgossip.engines.tick.schedule import NEVER, Schedule
from vecgossip.engines.tick.transport import Transport
from vecgossip.network.mixing import link_list, to_torch_csr

EPS = 1e-9          # a time within EPS x r of a window's start belongs to that window (rounding of k x c)
EXCHANGE = 1 << 50  # transfer tags from here on are AD-PSGD's exchange messages (2 x id + direction)


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


class TimedTransport(Transport):
    """Step 2 in seconds: each sent model becomes one message per link, in flight until the
    transfers deliver it; each window's deliveries go into the buffers as one batched receive
    per send wave. ``message_bytes``: one message's size. Instant links (no latency, no limit)
    take the tick engine's own send."""

    def __init__(self, *args, clock: Seconds, schedule: SecondsSchedule, message_bytes: float, **kw) -> None:
        super().__init__(*args, **kw)
        self.clock, self.schedule, self.message_bytes = clock, schedule, float(message_bytes)
        self.flow = Transfers(clock.uplink, clock.downlink, clock.policy)
        self.snaps: dict[int, list] = {}        # send wave id -> [models (M, P), send times (M,), messages in flight (M,),
                                                #   fragment ids (M, P) int8 or None (whole models)]
        self.wave = 0                           # the next send wave's id
        self.arrived: list[tuple] = []          # (receivers, tags, time, senders), not yet received
        n = self.n                              # host arrays cover every node (on every rank when sharded)
        self.bytes_sent = np.zeros(n)           # per sender
        self.received = np.zeros(n)             # messages per receiver
        self.staleness = np.zeros(n)            # per receiver: sum of (arrival - send) seconds
        self.aborted = 0                        # churn: messages lost to a node offline (at start or in flight)
        self.flushed = 0                        # DivShare: queued fragments dropped for a newer model's
        self.pending = empty_exchanges()        # AD-PSGD's exchanges in flight, node-first arrays by id
        self.grads: dict[int, list] = {}        # gradient wave -> [(M, P) gradients, exchanges pending]
        self.next_exchange = 0
        self.cut = np.zeros(0, dtype=np.int64)  # churn: exchanges that lost a message at this window's start
        self.parts = 1                          # fragments a model is cut into (DivShare; 1: whole models)
        self.cache = None                       # SWIFT: (n, d_max, P) the latest model from each in-neighbour
        self.cache_time = self.slot = None      # its send times (n, d_max) (-inf: none yet); slot[r, s] (n, n)
        self.frag_sum = self.frag_count = None  # DivShare: (n, P) sums and counts of the fragments received
        self.weights: dict[int, np.ndarray] = {}   # send wave -> each row's weight (age-weighted merges)
        self.fragment_sizes: dict[int, np.ndarray] = {}   # send wave -> (M, F) parameters per fragment (host)
        self.here: dict[int, np.ndarray] = {}   # sharded: send wave -> each sender's row in the rank's snapshot (-1)
        self.frag_max = np.zeros(n)             # the largest weight received since each node's last merge
        schedule.arrivals = self.next_window

    def tag(self, wave, row, frag=0):
        """A message's transfer tag: its send wave, its row in the wave's snapshot, its fragment."""
        return (np.asarray(wave) * self.n + row) * self.parts + frag

    def untag(self, tag: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(wave, row, fragment) of each tag."""
        base, frag = np.divmod(tag, self.parts)
        wave, row = np.divmod(base, self.n)
        return wave, row, frag

    def next_window(self) -> int:
        """The window of the next transfer event (a delivery, or a last byte leaving)."""
        nxt = self.flow.next_event()
        return int(self.clock.window(nxt)) if np.isfinite(nxt) else NEVER

    def send(self, senders: np.ndarray, online: np.ndarray | None = None, t: int = 0) -> None:
        """The ``senders``' fresh models leave at their steps' completion times; every message
        delivered before window t ends goes into its receiver's buffer."""
        if self.clock.instant and self.cache is None:
            if senders.size:
                recv, send = link_list(self.wiring.a_full, senders)
                self.bytes_sent += np.bincount(send, minlength=self.n) * self.message_bytes
                self.received += np.bincount(recv, minlength=self.n)
                super().send(senders, online, t)
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

    # -- DivShare's fragments (ctx.send_fragments, ctx.merge_fragments) -------------------------
    def send_fragments(self, senders: np.ndarray, ids, recipients: np.ndarray, online: np.ndarray | None,
                       t: int, flush: bool = False, weights: np.ndarray | None = None) -> None:
        """Each sender's fresh model, cut into F fragments (``ids`` (M, P): each parameter's fragment),
        fragment f to the nodes ``recipients[m, f]`` (M, F, J): one message per (fragment,
        recipient) of the fragment's bytes, queued at its step's time in (sender, fragment,
        recipient) order (``flush``: first the sender's older fragments still waiting in its
        FIFO queue are dropped, :meth:`flush`; ``weights`` (M,): each sender's weight, its values
        and counts arrive multiplied by it, default 1); then every message delivered before
        window t ends is received (:meth:`fragments_in`)."""
        end = (t + 1) * self.clock.resolution
        if online is None:
            online = self.schedule.online
        if online is not None:
            self.abort(np.flatnonzero(~online))
        if senders.size:
            m, f, j = recipients.shape
            if self.parts == 1 and not self.flow.sender.size and not self.snaps:
                self.parts = f
            if f != self.parts:
                raise ValueError(f"a run cuts every model into one number of fragments: {f} != {self.parts}")
            if f == 1:                                           # whole models (gossip timers): known here
                counts = np.full((m, 1), self.state.theta.shape[1], dtype=np.int64)
            else:                                                # (M, F): the wave's one read of the device
                counts = count_fragments(ids, f).cpu().numpy()
            sizes = counts * self.state.theta.element_size()     # bytes
            row = np.repeat(np.arange(m), f * j)
            frag = np.tile(np.repeat(np.arange(f), j), m)
            recv = recipients.reshape(-1).astype(np.int64)
            if online is not None:
                self.aborted += int((~online[recv]).sum())
                row, frag, recv = row[online[recv]], frag[online[recv]], recv[online[recv]]
            if recv.size:
                wave = self.wave
                self.wave += 1
                times = self.schedule.sent_at[senders]
                self.snaps[wave] = [self.snapshot(wave, senders, recv, row), times.copy(),
                                    np.bincount(row, minlength=m), ids]
                self.fragment_sizes[wave] = counts
                if weights is not None:
                    self.weights[wave] = self.shard.gather_host(weights, self.shard.counts(senders))
                tag = self.tag(wave, row, frag)
                at = times[row]
                for tau in np.unique(at):                    # in time order; at one time in message order
                    self.run_until(max(float(tau), self.flow.now), strict=False)
                    go = at == tau
                    if flush:
                        self.flush(senders[times == tau])
                    s = senders[row[go]]
                    size = sizes[row[go], frag[go]]
                    self.flow.start(s, recv[go], size, self.clock.latency[s, recv[go]], tag[go])
                    np.add.at(self.bytes_sent, s, size)
                    self.collect()
        self.run_until(end, strict=True)
        self.receive_arrived()

    def mine(self, nodes: np.ndarray) -> np.ndarray:
        """Which of the global ``nodes`` (any order) are this process's rows (all in one process)."""
        return self.shard.owner(nodes) == self.shard.rank

    def flush(self, nodes: np.ndarray) -> None:
        """DivShare's queue flush: under the fifo policy, the messages of ``nodes`` still waiting
        behind the one on the wire are dropped (their bytes were never sent: taken off
        ``bytes_sent``; counted in ``flushed``). Under fair sharing every message is on the wire:
        nothing waits, nothing is dropped."""
        f = self.flow
        if self.clock.policy != "fifo" or not f.sender.size or not nodes.size:
            return
        mine = np.zeros(self.n, dtype=bool)
        mine[nodes] = True
        idx = np.flatnonzero(np.isnan(f.sent_at) & mine[f.sender])
        if not idx.size:
            return
        order = idx[np.lexsort((f.seq[idx], f.sender[idx]))]
        head = np.r_[True, f.sender[order[1:]] != f.sender[order[:-1]]]
        drop = order[~head]
        if not drop.size:
            return
        np.subtract.at(self.bytes_sent, f.sender[drop], f.size[drop])
        self.flushed += drop.size
        wave, row, _ = self.untag(f.tag[drop])
        f.remove(drop)
        self.release(wave, row)

    def fragments_in(self, recv: np.ndarray, row: np.ndarray, frag: np.ndarray, snap, ids, sizes: np.ndarray,
                     weights: np.ndarray | None = None, here: np.ndarray | None = None) -> None:
        """Fragment ``frag[k]`` of snapshot row ``row[k]`` arrives at node ``recv[k]``: its values
        add to the receiver's sums and 1 to its counts, parameter by parameter (both times the
        row's weight when the wave has ``weights``; the receiver's largest weight is kept). A message touches
        only its own ~P / F parameters: each row's parameters sorted by fragment (one stable sort
        per wave), a message's positions are one run of that order, and all messages' positions go
        into one flat index_add_ (at most ~2**22 positions at a time). ``sizes`` (M, F): each
        row's parameters per fragment, on the host (read once at the send): no read of the device here.
        Sharded: every rank keeps the largest weights of all nodes; the sums and counts of its own
        receivers, their senders' models at rows ``here[row]`` of this rank's snapshot (:attr:`here`)."""
        theta = self.state.theta
        if self.frag_sum is None:
            self.frag_sum, self.frag_count = torch.zeros_like(theta), torch.zeros_like(theta)
        if weights is not None:
            np.maximum.at(self.frag_max, recv, weights[row])
        src = row
        if self.shard.sharded:
            keep = self.mine(recv)
            recv, row, frag = recv[keep] - self.shard.lo, row[keep], frag[keep]
            src = here[row]
            if not recv.size:
                return
        p, dev = theta.shape[1], self.device
        used = np.unique(row)
        rows = upload(used, dev)
        order = torch.sort(ids[rows], dim=1, stable=True).indices            # (U, P): params by fragment
        counts = sizes[used]                                                  # (U, F)
        offset = np.cumsum(counts, 1) - counts
        at = np.searchsorted(used, row)
        length_host = counts[at, frag]                                        # (A,) each message's parameters
        length = upload(length_host, dev)
        first = upload(at * p + offset[at, frag], dev)                        # its run in order.view(-1)
        sums, cnts = self.frag_sum.view(-1), self.frag_count.view(-1)
        flat_order, flat_snap = order.view(-1), snap.view(-1)
        src_row = upload(src, dev)
        dst_row = upload(recv, dev)
        ends = np.cumsum(length_host)
        lo = 0
        while lo < recv.size:                                                 # chunks of ~4M positions
            hi = max(lo + 1, int(np.searchsorted(ends, (ends[lo - 1] if lo else 0) + (1 << 22), "right")))
            hi = min(hi, recv.size)
            ln, total = length[lo:hi], int(ends[hi - 1] - (ends[lo - 1] if lo else 0))
            rep = torch.repeat_interleave(torch.arange(hi - lo, device=dev), ln, output_size=total)
            within = torch.arange(total, device=dev) - torch.repeat_interleave(torch.cumsum(ln, 0) - ln, ln,
                                                                               output_size=total)
            cols = flat_order[first[lo:hi][rep] + within]
            vals = flat_snap[src_row[lo:hi][rep] * p + cols]
            dest = dst_row[lo:hi][rep] * p + cols
            if weights is None:
                sums.index_add_(0, dest, vals)
                cnts.index_add_(0, dest, torch.ones_like(vals))
            else:
                wt = upload(weights[row[lo:hi]], dev).to(vals.dtype)[rep]
                sums.index_add_(0, dest, vals * wt)
                cnts.index_add_(0, dest, wt)
            lo = hi

    # -- SWIFT's caches (ctx.average_cached) ---------------------------------------------------
    def use_cache(self, a_full) -> None:
        """Messages go into per-link caches (the latest model from each in-neighbour) instead of
        the buffers: slots in the receivers' in-neighbour order of ``a_full`` (receiver by sender)."""
        a = sp.csr_matrix(a_full)
        n, deg = a.shape[0], np.diff(a.indptr)
        dmax = max(int(deg.max(initial=0)), 1)
        self.slot = np.full((n, n), -1, dtype=np.int64)
        rows = np.repeat(np.arange(n), deg)
        self.slot[rows, a.indices] = np.arange(a.nnz) - a.indptr[rows]
        self.slot_sender = np.full((n, dmax), -1, dtype=np.int64)
        self.slot_sender[rows, np.arange(a.nnz) - a.indptr[rows]] = a.indices
        theta = self.state.theta
        self.cache = theta.new_zeros(self.state.n, dmax, theta.shape[1])     # this process's receivers
        self.cache_time = np.full((n, dmax), -np.inf)                        # every node's (host)

    def cache_in(self, recv: np.ndarray, row: np.ndarray, sender: np.ndarray, snap, times: np.ndarray,
                 here: np.ndarray | None = None) -> None:
        """Arrivals into the caches: for each (receiver, sender) the latest-sent model of these
        arrivals replaces the cached one if it was sent later (a message overtaken on the way
        is dropped). Sharded: the send times of every node's caches, the models of this
        process's receivers (their senders' at rows ``here[row]`` of its snapshot)."""
        k = self.slot[recv, sender]
        sent = times[row]
        key = recv * self.cache_time.shape[1] + k
        order = np.lexsort((sent, key))
        last = np.r_[key[order][1:] != key[order][:-1], True]
        pick = order[last]
        pick = pick[sent[pick] > self.cache_time[recv[pick], k[pick]]]
        if not pick.size:
            return
        self.cache_time[recv[pick], k[pick]] = sent[pick]
        src = row[pick]
        if self.shard.sharded:
            pick = pick[self.mine(recv[pick])]
            src = here[row[pick]]
            if not pick.size:
                return
        r, kk = upload(recv[pick] - self.shard.lo, self.device), upload(k[pick], self.device)
        self.cache[r, kk] = snap[upload(src, self.device)]

    def average_cached(self, nodes: np.ndarray, w) -> None:
        """SWIFT's wait-free average of ``nodes`` (this process's among them): x_i <- W_ii x_i +
        sum_j W_ij c_ij over its in-neighbours j, c_ij the latest model of j that i holds (none
        yet: x_i itself)."""
        rows = nodes[self.shard.block(nodes)]
        if not rows.size:
            return
        w = sp.csr_matrix(w)
        senders = self.slot_sender[rows]                                      # (M, dmax), -1 padding
        have = np.isfinite(self.cache_time[rows]) & (senders >= 0)
        wk = np.where(senders >= 0, np.asarray(w[rows[:, None], np.maximum(senders, 0)].todense()), 0.0)
        own = w.diagonal()[rows] + (wk * ~have).sum(1)
        idx = upload(rows - self.shard.lo, self.device)
        theta = self.state.theta
        weights = upload(np.where(have, wk, 0.0), self.device).to(theta.dtype)
        mixed = torch.bmm(weights[:, None, :], self.cache[idx]).squeeze(1)
        theta[idx] = upload(own, self.device).to(theta.dtype)[:, None] * theta[idx] + mixed

    def merge_fragments(self, nodes: np.ndarray, own=None) -> np.ndarray:
        """DivShare's aggregation: each of ``nodes`` averages every parameter with the values
        of it received since its last merge, x <- (x + sum) / (1 + count); with ``own`` (M,) its
        own weight, x <- (own x + sum) / (own + count) where own + count > 0 (else x stays).
        Its sums, counts and largest weight received empty; returns that largest weight (M,).
        Sharded: ``own`` and the result are this process's rows of ``nodes``; every rank empties
        the largest weights of all of them (kept on every rank)."""
        rows = nodes[self.shard.block(nodes)]
        got = self.frag_max[rows].copy()
        self.frag_max[nodes] = 0
        if self.frag_sum is None or not rows.size:
            return got
        idx = upload(rows - self.shard.lo, self.device)
        theta = self.state.theta
        if own is None:
            theta[idx] = (theta[idx] + self.frag_sum[idx]) / (1 + self.frag_count[idx])
        else:
            w = upload(np.asarray(own, np.float64), self.device).to(theta.dtype)[:, None]
            den = w + self.frag_count[idx]
            merged = (w * theta[idx] + self.frag_sum[idx]) / torch.where(den > 0, den, torch.ones_like(den))
            theta[idx] = torch.where(den > 0, merged, theta[idx])
        self.frag_sum[idx] = 0
        self.frag_count[idx] = 0
        return got

    # -- AD-PSGD's exchanges (ctx.pairwise_averages) ------------------------------------------
    @property
    def exchanges(self) -> int:
        """How many exchanges are in flight."""
        return int(self.pending["id"].size)

    def exchange(self, engine, nodes: np.ndarray, pairs: list[tuple[int, int]], grads) -> np.ndarray:
        """Each pair (i, j) starts two messages of the model's bytes at i's step time, i -> j and
        j -> i (in pair order); a node without a pair applies its gradient now. Every exchange
        complete before this window ends applies (:meth:`complete`)."""
        t = self.schedule.now
        cut = self.cut_offline(engine)                   # churn: exchanges cut at this window's start
        wave = self.wave
        self.wave += 1
        init = np.array([p[0] for p in pairs], dtype=np.int64)
        peer = np.array([p[1] for p in pairs], dtype=np.int64)
        online = self.schedule.online
        if online is not None and init.size:             # a peer offline: no exchange (2 messages never
            self.aborted += 2 * int((~online[peer]).sum())    # started), the initiator's step alone
            init, peer = init[online[peer]], peer[online[peer]]
        solo = np.setdiff1d(nodes, init)
        self.grads[wave] = [grads, init.size]
        first = self.shard.block(nodes).start            # grads: this process's rows of nodes, from this position
        here = solo[self.shard.block(solo)]
        bad = (engine.average_pairs([], solo, grads[upload(np.searchsorted(nodes, here) - first, grads.device)])
               if solo.size else nodes[:0])
        bad = np.union1d(bad, cut)
        if init.size:
            ids = self.next_exchange + np.arange(init.size)
            self.next_exchange += init.size
            rows = np.where(self.mine(init), np.searchsorted(nodes, init) - first, -1)   # in grads (-1: elsewhere)
            at = self.schedule.sent_at[init]
            new = {"id": ids, "i": init, "j": peer, "wave": np.full(init.size, wave), "row": rows,
                   "got": np.zeros(init.size, dtype=np.int64), "start": at.astype(float)}
            self.pending = {k: np.concatenate([v, new[k]]) for k, v in self.pending.items()}
            for tau in np.unique(at):                        # in time order; at one time in pair order
                self.run_until(max(float(tau), self.flow.now), strict=False)
                go = np.flatnonzero(at == tau)
                s_ = np.stack([init[go], peer[go]], 1).ravel()     # i -> j, then j -> i, pair by pair
                r_ = np.stack([peer[go], init[go]], 1).ravel()
                tags = EXCHANGE + 2 * np.repeat(ids[go], 2) + np.tile([0, 1], go.size)
                self.flow.start(s_, r_, self.message_bytes, self.clock.latency[s_, r_], tags)
                self.bytes_sent += np.bincount(s_, minlength=self.n) * self.message_bytes
                self.collect()
        return np.union1d(bad, self.complete(engine, (t + 1) * self.clock.resolution))

    def complete(self, engine, end: float) -> np.ndarray:
        """Every exchange whose two messages arrive before ``end``: in the order they complete
        (time, then start order), the pairs' averages, then each initiator's gradient (a node
        whose exchanges complete twice in one window steps once per exchange, in order)."""
        self.run_until(end, strict=True)
        if not self.arrived:
            return np.zeros(0, dtype=np.int64)
        tag = np.concatenate([a[1] for a in self.arrived])
        when = np.concatenate([np.full(a[1].size, a[2]) for a in self.arrived])
        self.arrived = [(r[t < EXCHANGE], t[t < EXCHANGE], w, s[t < EXCHANGE]) for r, t, w, s in self.arrived
                        if (t < EXCHANGE).any()]
        ex = tag >= EXCHANGE
        if not ex.any():
            return np.zeros(0, dtype=np.int64)
        p = self.pending
        at = np.searchsorted(p["id"], (tag[ex] - EXCHANGE) // 2)          # ids ascend: started in order
        np.add.at(p["got"], at, 1)
        last = np.full(p["id"].size, -np.inf)
        np.maximum.at(last, at, when[ex])                                  # the second message's arrival
        done = np.flatnonzero(p["got"] == 2)
        if not done.size:
            return np.zeros(0, dtype=np.int64)
        d = done[np.lexsort((p["id"][done], last[done]))]                  # completion order
        i, j, took = p["i"][d], p["j"][d], last[d] - p["start"][d]
        for side in (i, j):
            np.add.at(self.received, side, 1)
            np.add.at(self.staleness, side, took)                         # the exchange's duration
        none = np.zeros(0, dtype=np.int64)
        bad = [engine.average_pairs(list(zip(i.tolist(), j.tolist())), none, None)]
        return np.unique(np.concatenate(bad + self.finish(engine, d, d)))

    def finish(self, engine, d: np.ndarray, apply: np.ndarray) -> list[np.ndarray]:
        """Exchanges ``d`` (positions in :attr:`pending`) end: the initiators' gradients of those
        in ``apply`` (a subsequence of ``d``) apply in its order (a node with several steps in one
        window once per exchange, in order); all of ``d`` leave :attr:`pending` and release their
        gradients. Returns the nodes no longer finite."""
        p = self.pending
        bad = []
        i = p["i"][apply]
        by = np.argsort(i, kind="stable")                                  # each initiator once per round, in order
        first = np.r_[True, i[by][1:] != i[by][:-1]]
        rank = np.empty(apply.size, dtype=np.int64)
        rank[by] = np.arange(apply.size) - np.maximum.accumulate(np.where(first, np.arange(apply.size), 0))
        wave, row = p["wave"][apply], p["row"][apply]
        for k in range(int(rank.max(initial=-1)) + 1):
            sel = np.flatnonzero(rank == k)
            sel = sel[np.argsort(i[sel], kind="stable")]
            local = sel[row[sel] >= 0]                                     # this process's initiators (sharded)
            some = self.grads[int(wave[sel[0]])][0]
            g = some.new_empty(local.size, some.shape[1])
            for w in np.unique(wave[local]):
                m = np.flatnonzero(wave[local] == w)
                src = self.grads[int(w)][0]
                g[upload(m, src.device)] = src[upload(row[local][m], src.device)]
            bad.append(engine.average_pairs([], i[sel], g))
        for w, c in zip(*np.unique(p["wave"][d], return_counts=True)):
            self.grads[int(w)][1] -= int(c)
            if self.grads[int(w)][1] == 0:
                del self.grads[int(w)]
        keep = np.ones(p["id"].size, dtype=bool)
        keep[d] = False
        self.pending = {k: v[keep] for k, v in p.items()}
        return bad

    def cut_offline(self, engine) -> np.ndarray:
        """Churn, at a window's start: every transfer from or to an offline node is lost
        (:meth:`abort`); an exchange that loses a message is cut: no average, its initiator's
        gradient applies alone now if it is online, and is lost with it if not (in exchange
        order). Returns the nodes no longer finite."""
        online = self.schedule.online
        none = np.zeros(0, dtype=np.int64)
        if online is None:
            return none
        self.abort(np.flatnonzero(~online))
        if not self.cut.size:
            return none
        ids, self.cut = self.cut, none
        kept = []                               # a cut exchange's message that arrived at the window's start
        for r, tag, w, s in self.arrived:
            keep = (tag < EXCHANGE) | ~np.isin((tag - EXCHANGE) // 2, ids)
            kept.append((r[keep], tag[keep], w, s[keep]))
        self.arrived = kept
        d = np.flatnonzero(np.isin(self.pending["id"], ids))                 # ids ascend: exchange order
        bad = self.finish(engine, d, d[online[self.pending["i"][d]]])
        return np.unique(np.concatenate([none, *bad]))

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
        ex = tags >= EXCHANGE                   # AD-PSGD: the exchanges cut (:meth:`cut_offline`)
        if ex.any():
            self.cut = np.union1d(self.cut, (tags[ex] - EXCHANGE) // 2)
        if not ex.all():
            wave, row, _ = self.untag(tags[~ex])
            self.release(wave, row)

    def release(self, wave: np.ndarray, row: np.ndarray) -> None:
        """Messages of send waves ``wave`` rows ``row`` no longer in flight (lost)."""
        for w in np.unique(wave):
            left = self.snaps[int(w)][2]
            left -= np.bincount(row[wave == w], minlength=left.size)
            if not left.any():
                del self.snaps[int(w)]
                self.here.pop(int(w), None)
                self.weights.pop(int(w), None)
                self.fragment_sizes.pop(int(w), None)
            elif (left == 0).sum() * 2 > left.size:
                self.compact(int(w))

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
        at = times[row]
        for tau in np.unique(at):                            # in time order; at one time in (sender, receiver) order
            self.run_until(max(float(tau), self.flow.now), strict=False)   # (a time EPS before the window: at it)
            go = at == tau
            s, r = send[go], recv[go]
            self.flow.start(s, r, self.message_bytes, self.clock.latency[s, r], tag[go])
            self.bytes_sent += np.bincount(s, minlength=self.n) * self.message_bytes
            self.collect()

    def snapshot(self, wave: int, senders: np.ndarray, recv: np.ndarray, row: np.ndarray) -> torch.Tensor:
        """The sorted ``senders``' models at their send (the messages ``row`` -> ``recv`` start):
        one process, their rows. Sharded, the rows this rank's receivers will get, fetched now
        from their owners (all_to_all: only those; all_gather: every sender's), and
        :attr:`here` [wave] maps each sender to its row in them."""
        if not self.shard.sharded:
            return self.state.theta[upload(senders, self.device)].clone()
        got, cols = self.fetch(senders, False, (recv, row))       # new tensors: gathered or exchanged rows
        self.here[wave] = np.full(senders.size, -1, dtype=np.int64)
        self.here[wave][np.searchsorted(senders, cols)] = np.arange(got.shape[0])
        return got

    def run_until(self, until: float, strict: bool) -> None:
        """Transfers advance to ``until`` (strict: every event before it; else up to and at it,
        the clock then at ``until``), their deliveries collected in order."""
        while True:
            nxt = self.flow.next_event()
            if nxt > until or (strict and nxt >= until) or not np.isfinite(nxt):
                break
            self.flow.advance(nxt)
            self.collect()
        if not strict and until > self.flow.now:
            self.flow.advance(until)
            self.collect()

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
        wave, row, frag = self.untag(tag)
        for w in np.unique(wave):
            pick = wave == w
            r, j = recv[pick], row[pick]
            snap, times, _, ids = self.snaps[int(w)]
            np.add.at(self.staleness, r, when[pick] - times[j])
            self.received += np.bincount(r, minlength=n)
            if ids is not None:
                self.fragments_in(r, j, frag[pick], snap, ids, self.fragment_sizes[int(w)], self.weights.get(int(w)),
                                  self.here.get(int(w)))
            elif self.cache is not None:
                self.cache_in(r, j, sender[pick], snap, times, self.here.get(int(w)))
            else:                                # sharded: the senders' rows in this rank's snapshot
                self.receive_here(r, j if int(w) not in self.here else self.here[int(w)][j], snap)
        self.release(wave, row)

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
                             snap, self.layout)

    def compact(self, w: int) -> None:
        """Send wave ``w``'s snapshot keeps only the models still in flight (a slow uplink must not
        hold a whole wave's models): its rows renumbered, in the transfers' tags too."""
        snap, times, left, ids = self.snaps[w]
        keep = np.flatnonzero(left > 0)
        new = np.full(left.size, -1, dtype=np.int64)
        new[keep] = np.arange(keep.size)
        wave, row, frag = self.untag(self.flow.tag)
        mine = wave == w
        self.flow.tag[mine] = self.tag(w, new[row[mine]], frag[mine])
        rows = keep
        if w in self.here:                      # sharded: the kept senders' rows held here, renumbered
            pos = self.here[w][keep]
            rows = pos[pos >= 0]
            self.here[w] = np.where(pos >= 0, np.cumsum(pos >= 0) - 1, -1)
        at = upload(rows, self.device)
        self.snaps[w] = [snap[at], times[keep], left[keep], None if ids is None else ids[upload(keep, self.device)]]
        if w in self.weights:
            self.weights[w] = self.weights[w][keep]
        if w in self.fragment_sizes:
            self.fragment_sizes[w] = self.fragment_sizes[w][keep]

    def state_dict(self) -> dict:
        return {"flow": self.flow.state(),
                "snaps": {k: [v[0], v[1].copy(), v[2].copy(), v[3]] for k, v in self.snaps.items()}, "wave": self.wave,
                "parts": self.parts, "frag_sum": self.frag_sum, "frag_count": self.frag_count,
                "weights": {k: v.copy() for k, v in self.weights.items()}, "frag_max": self.frag_max.copy(),
                "fragment_sizes": {k: v.copy() for k, v in self.fragment_sizes.items()},
                "here": {k: v.copy() for k, v in self.here.items()},
                "cache": self.cache, "cache_time": None if self.cache_time is None else self.cache_time.copy(),
                "bytes_sent": self.bytes_sent.copy(), "received": self.received.copy(),
                "staleness": self.staleness.copy(), "aborted": self.aborted, "flushed": self.flushed,
                "exchanges": {k: v.copy() for k, v in self.pending.items()},
                "grads": {k: [v[0], v[1]] for k, v in self.grads.items()}, "next_exchange": self.next_exchange}

    def load_state_dict(self, d: dict) -> None:
        self.flow.load(d["flow"])
        self.snaps = {int(k): [v[0].to(self.device), np.asarray(v[1]), np.asarray(v[2]),
                               None if v[3] is None else v[3].to(self.device)] for k, v in d["snaps"].items()}
        self.parts = int(d["parts"])
        self.frag_sum, self.frag_count = (None if d[k] is None else d[k].to(self.device) for k in ("frag_sum", "frag_count"))
        self.weights = {int(k): np.asarray(v).copy() for k, v in d["weights"].items()}
        self.fragment_sizes = {int(k): np.asarray(v).copy() for k, v in d["fragment_sizes"].items()}
        self.here = {int(k): np.asarray(v).copy() for k, v in d.get("here", {}).items()}
        self.frag_max[:] = d["frag_max"]
        if d["cache"] is not None:
            self.cache[:] = d["cache"].to(self.device)
            self.cache_time[:] = d["cache_time"]
        self.wave = int(d["wave"])
        self.bytes_sent[:], self.received[:], self.staleness[:] = d["bytes_sent"], d["received"], d["staleness"]
        self.aborted, self.flushed = int(d["aborted"]), int(d["flushed"])
        self.pending = {k: np.asarray(v).copy() for k, v in d["exchanges"].items()}
        self.grads = {int(k): [v[0].to(self.device), int(v[1])] for k, v in d["grads"].items()}
        self.next_exchange = int(d["next_exchange"])
        self.arrived = []


def empty_exchanges() -> dict[str, np.ndarray]:
    """No exchange in flight: ids, initiators, peers, gradient waves and rows, messages arrived
    (int64), start times (float)."""
    return {**{k: np.zeros(0, dtype=np.int64) for k in ("id", "i", "j", "wave", "row", "got")},
            "start": np.zeros(0)}


def count_fragments(ids, parts: int):
    """(M, F) how many parameters each row's fragment holds, from ``ids`` (M, P) fragment ids."""
    m = ids.shape[0]
    flat = ids.long() + parts * torch.arange(m, device=ids.device)[:, None]
    return torch.bincount(flat.reshape(-1), minlength=m * parts).reshape(m, parts)


def message_bytes(params: int, element_size: int, compression: float) -> float:
    """One gossip message's bytes: the model's parameters, or under weight compression the expected
    ``ceil(p x P)`` sent elements (the mask comes from a shared seed: no indices travel)."""
    return float(math.ceil(compression * params) * element_size)
