"""Messages whose payload is a subset of a model's parameters (issue 55: a generic mechanism on the
timed message), reduced at the receiver as a weighted sum and count per parameter: a sender cuts
its fresh model into F parts (each parameter in one), sends part f to the nodes it names, and a
receiver's merge averages every parameter with the values of it received since its last merge,
x <- (own x + sum) / (own + count). F = 1 is a whole model (an age-weighted merge of whole models);
a FIFO uplink may replace a sender's waiting parts by a newer model's (``replace_waiting``)."""
from __future__ import annotations

import numpy as np
import torch

from vecgossip.core.device import upload
from vecgossip.runtime.memory import PART_POSITIONS as POSITIONS   # positions one receive step handles at once

class PartsInbox:
    """The parts half of :class:`~.transport.TimedTransport` (its flow, snapshots and waves)."""

    def init_parts(self, n: int) -> None:
        self.parts = 1                          # parts a model is cut into (1: whole models)
        self.part_sum = self.part_count = None  # (n', P) sums and counts of the values received since the last merge
        self.weights: dict[int, np.ndarray] = {}   # send wave -> each row's weight (weighted merges)
        self.part_sizes: dict[int, np.ndarray] = {}   # send wave -> (M, F) parameters per part (host)
        self.part_weight_max = np.zeros(n)      # the largest weight received since each node's last merge
        self.dropped = 0                        # waiting parts replaced by a newer model's (never sent)
        self.arrival_weight = None              # the algorithm's weight of a message by its staleness (or None)

    def parts_state(self) -> dict:
        return {"parts": self.parts, "part_sum": self.part_sum, "part_count": self.part_count,
                "weights": {k: v.copy() for k, v in self.weights.items()}, "part_weight_max": self.part_weight_max.copy(),
                "part_sizes": {k: v.copy() for k, v in self.part_sizes.items()}, "dropped": self.dropped}

    def load_parts(self, d: dict) -> None:
        self.parts = int(d["parts"])
        self.part_sum, self.part_count = (None if d[k] is None else d[k].to(self.device) for k in ("part_sum", "part_count"))
        self.weights = {int(k): np.asarray(v).copy() for k, v in d["weights"].items()}
        self.part_sizes = {int(k): np.asarray(v).copy() for k, v in d["part_sizes"].items()}
        self.part_weight_max[:] = d["part_weight_max"]
        self.dropped = int(d["dropped"])

    def send_parts(self, senders: np.ndarray, ids, recipients: np.ndarray, online: np.ndarray | None,
                       t: int, replace_waiting: bool = False, weights: np.ndarray | None = None) -> None:
        """Each sender's fresh model, cut into F parts (``ids`` (M, P): each parameter's part),
        part f to the nodes ``recipients[m, f]`` (M, F, J): one message per (part,
        recipient) of the part's bytes, queued at its step's time in (sender, part,
        recipient) order (``replace_waiting``: first the sender's older parts still waiting in its
        FIFO queue are dropped, :meth:`replace_waiting`; ``weights`` (M,): each sender's weight, its values
        and counts arrive multiplied by it, default 1); then every message delivered before
        window t ends is received (:meth:`parts_in`)."""
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
                raise ValueError(f"a run cuts every model into one number of parts: {f} != {self.parts}")
            if f == 1:                                           # whole models: known here
                counts = np.full((m, 1), self.state.theta.shape[1], dtype=np.int64)
                if ids is None:                                  # every parameter in the one part
                    ids = torch.zeros(m, self.state.theta.shape[1], dtype=torch.int8, device=self.device)
            else:                                                # (M, F): the wave's one read of the device
                counts = count_parts(ids, f).cpu().numpy()
            sizes = counts * self.state.theta.element_size()     # bytes
            row = np.repeat(np.arange(m), f * j)
            part = np.tile(np.repeat(np.arange(f), j), m)
            recv = recipients.reshape(-1).astype(np.int64)
            if online is not None:
                self.aborted += int((~online[recv]).sum())
                row, part, recv = row[online[recv]], part[online[recv]], recv[online[recv]]
            if recv.size:
                wave = self.wave
                self.wave += 1
                times = self.schedule.sent_at[senders]
                self.snaps[wave] = [self.snapshot(wave, senders, recv, row), times.copy(),
                                    np.bincount(row, minlength=m), ids]
                self.part_sizes[wave] = counts
                if weights is not None:
                    self.weights[wave] = self.shard.gather_host(weights, self.shard.counts(senders))
                tag = self.tag(wave, row, part)
                at = times[row]
                if not replace_waiting:                      # in time order; at one time in message order
                    s = senders[row]
                    size = sizes[row, part]
                    self.begin(at, s, recv, size, tag)
                    np.add.at(self.bytes_sent, s, size)
                    at = at[:0]
                for tau in np.unique(at):                    # fifo, a newer model replacing the waiting ones
                    self.run_until(max(float(tau), self.flow.now), strict=False)
                    go = at == tau
                    if replace_waiting:
                        self.drop_waiting(senders[times == tau])
                    s = senders[row[go]]
                    size = sizes[row[go], part[go]]
                    self.flow.start(s, recv[go], size, self.clock.latency[s, recv[go]], tag[go])
                    np.add.at(self.bytes_sent, s, size)
                    self.collect()
        self.run_until(end, strict=True)
        self.receive_arrived()

    def drop_waiting(self, nodes: np.ndarray) -> None:
        """A newer model replaces the waiting one: under the fifo policy, the messages of ``nodes``
        still waiting behind the one on the wire are dropped (their bytes were never sent: taken
        off ``bytes_sent``; counted in :attr:`dropped`). Under fair sharing every message is on
        the wire: nothing waits, nothing is dropped."""
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
        self.dropped += drop.size
        wave, row, _ = self.untag(f.tag[drop])
        f.remove(drop)
        self.release(wave, row)

    def message_weights(self, row: np.ndarray, stale: np.ndarray, wave_weights: np.ndarray | None) -> np.ndarray | None:
        """Each arriving message's weight (A,): its sender's (``wave_weights[row]``, the send's
        ``weights``) times the algorithm's ``arrival_weight`` of its staleness ``stale`` (A,)
        seconds (arrival - send); None when neither is given (every weight 1)."""
        w = None if wave_weights is None else wave_weights[row]
        if self.arrival_weight is None:
            return w
        got = np.asarray(self.arrival_weight(stale), dtype=np.float64)
        if got.shape != stale.shape or not np.isfinite(got).all() or (got < 0).any():
            from vecgossip.core.errors import ConfigError
            raise ConfigError(f"arrival_weight must return one finite weight >= 0 per message ({stale.size},), "
                              f"got shape {got.shape}")
        return got if w is None else w * got

    def parts_in(self, recv: np.ndarray, row: np.ndarray, part: np.ndarray, snap, ids, sizes: np.ndarray,
                 weights: np.ndarray | None = None, here: np.ndarray | None = None) -> None:
        """Part ``part[k]`` of snapshot row ``row[k]`` arrives at node ``recv[k]``: its values
        add to the receiver's sums and 1 to its counts, parameter by parameter (both times the
        message's weight ``weights[k]`` when given, :meth:`message_weights`; the receiver's largest weight is kept). A message touches
        only its own ~P / F parameters: each row's parameters sorted by part (one stable sort
        per wave), a message's positions are one run of that order, and all messages' positions go
        into one flat index_add_ (at most ~2**22 positions at a time). ``sizes`` (M, F): each
        row's parameters per part, on the host (read once at the send): no read of the device here.
        Sharded: every rank keeps the largest weights of all nodes; the sums and counts of its own
        receivers, their senders' models at rows ``here[row]`` of this rank's snapshot (:attr:`here`)."""
        theta = self.state.theta
        if self.part_sum is None:
            self.part_sum, self.part_count = torch.zeros_like(theta), torch.zeros_like(theta)
        if weights is not None:
            np.maximum.at(self.part_weight_max, recv, weights)
        src = row
        if self.shard.sharded:
            keep = self.mine(recv)
            recv, row, part = recv[keep] - self.shard.lo, row[keep], part[keep]
            weights = None if weights is None else weights[keep]
            src = here[row]
            if not recv.size:
                return
        p, dev = theta.shape[1], self.device
        used = np.unique(row)
        rows = upload(used, dev)
        order = torch.sort(ids[rows], dim=1, stable=True).indices            # (U, P): params by part
        counts = sizes[used]                                                  # (U, F)
        offset = np.cumsum(counts, 1) - counts
        at = np.searchsorted(used, row)
        length_host = counts[at, part]                                        # (A,) each message's parameters
        length = upload(length_host, dev)
        first = upload(at * p + offset[at, part], dev)                        # its run in order.view(-1)
        sums, cnts = self.part_sum.view(-1), self.part_count.view(-1)
        flat_order, flat_snap = order.view(-1), snap.view(-1)
        src_row = upload(src, dev)
        dst_row = upload(recv, dev)
        ends = np.cumsum(length_host)
        lo = 0
        while lo < recv.size:                                                 # chunks of ~4M positions
            hi = max(lo + 1, int(np.searchsorted(ends, (ends[lo - 1] if lo else 0) + POSITIONS, "right")))
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
                wt = upload(weights[lo:hi], dev).to(vals.dtype)[rep]
                sums.index_add_(0, dest, vals * wt)
                cnts.index_add_(0, dest, wt)
            lo = hi

    def merge_parts(self, nodes: np.ndarray, own=None) -> np.ndarray:
        """The merge of what arrived: each of ``nodes`` averages every parameter with the values
        of it received since its last merge, x <- (x + sum) / (1 + count); with ``own`` (M,) its
        own weight, x <- (own x + sum) / (own + count) where own + count > 0 (else x stays).
        Its sums, counts and largest weight received empty; returns that largest weight (M,).
        Sharded: ``own`` and the result are this process's rows of ``nodes``; every rank empties
        the largest weights of all of them (kept on every rank)."""
        rows = nodes[self.shard.block(nodes)]
        got = self.part_weight_max[rows].copy()
        self.part_weight_max[nodes] = 0
        if self.part_sum is None or not rows.size:
            return got
        idx = upload(rows - self.shard.lo, self.device)
        theta = self.state.theta
        if own is None:
            theta[idx] = (theta[idx] + self.part_sum[idx]) / (1 + self.part_count[idx])
        else:
            w = upload(np.asarray(own, np.float64), self.device).to(theta.dtype)[:, None]
            den = w + self.part_count[idx]
            merged = (w * theta[idx] + self.part_sum[idx]) / torch.where(den > 0, den, torch.ones_like(den))
            theta[idx] = torch.where(den > 0, merged, theta[idx])
        self.part_sum[idx] = 0
        self.part_count[idx] = 0
        return got


def count_parts(ids, parts: int):
    """(M, F) how many parameters each row's part holds, from ``ids`` (M, P) part ids."""
    m = ids.shape[0]
    flat = ids.long() + parts * torch.arange(m, device=ids.device)[:, None]
    return torch.bincount(flat.reshape(-1), minlength=m * parts).reshape(m, parts)

