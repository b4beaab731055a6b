"""An inbox that keeps the latest message per link (issue 55: a generic mechanism on the timed
message): each receiver holds, per in-neighbour, the latest-sent model received from it (a message
overtaken on the way is dropped), and a node averages with what it holds, without waiting."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from vecgossip.core.device import upload


class LatestInbox:
    """The latest-per-link half of :class:`~.transport.TimedTransport`."""

    def init_latest(self) -> None:
        self.latest = None                      # (n', d_max, P) the latest model from each in-neighbour
        self.latest_time = self.slot = None     # its send times (n, d_max) (-inf: none yet); slot[r, s] (n, n)

    def latest_state(self) -> dict:
        return {"latest": self.latest, "latest_time": None if self.latest_time is None else self.latest_time.copy()}

    def load_latest(self, d: dict) -> None:
        if d["latest"] is not None:
            self.latest[:] = d["latest"].to(self.device)
            self.latest_time[:] = d["latest_time"]

    def use_latest(self, a_full) -> None:
        """Messages go into a per-link inbox (the latest model from each in-neighbour) instead of
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
        self.latest = theta.new_zeros(self.state.n, dmax, theta.shape[1])     # this process's receivers
        self.latest_time = np.full((n, dmax), -np.inf)                        # every node's (host)

    def latest_in(self, recv: np.ndarray, row: np.ndarray, sender: np.ndarray, snap, times: np.ndarray,
                 here: np.ndarray | None = None) -> None:
        """Arrivals into the per-link inbox: for each (receiver, sender) the latest-sent model of these
        arrivals replaces the one held if it was sent later (a message overtaken on the way
        is dropped). Sharded: the send times of every node's latest, the models of this
        process's receivers (their senders' at rows ``here[row]`` of its snapshot)."""
        k = self.slot[recv, sender]
        sent = times[row]
        key = recv * self.latest_time.shape[1] + k
        order = np.lexsort((sent, key))
        last = np.r_[key[order][1:] != key[order][:-1], True]
        pick = order[last]
        pick = pick[sent[pick] > self.latest_time[recv[pick], k[pick]]]
        if not pick.size:
            return
        self.latest_time[recv[pick], k[pick]] = sent[pick]
        src = row[pick]
        if self.shard.sharded:
            pick = pick[self.mine(recv[pick])]
            src = here[row[pick]]
            if not pick.size:
                return
        r, kk = upload(recv[pick] - self.shard.lo, self.device), upload(k[pick], self.device)
        self.latest[r, kk] = snap[upload(src, self.device)]

    def average_latest(self, nodes: np.ndarray, w) -> None:
        """The wait-free average of ``nodes`` (this process's among them): x_i <- W_ii x_i +
        sum_j W_ij c_ij over its in-neighbours j, c_ij the latest model of j that i holds (none
        yet: x_i itself)."""
        rows = nodes[self.shard.block(nodes)]
        if not rows.size:
            return
        w = sp.csr_matrix(w)
        senders = self.slot_sender[rows]                                      # (M, dmax), -1 padding
        have = np.isfinite(self.latest_time[rows]) & (senders >= 0)
        wk = np.where(senders >= 0, np.asarray(w[rows[:, None], np.maximum(senders, 0)].todense()), 0.0)
        own = w.diagonal()[rows] + (wk * ~have).sum(1)
        idx = upload(rows - self.shard.lo, self.device)
        theta = self.state.theta
        weights = upload(np.where(have, wk, 0.0), self.device).to(theta.dtype)
        mixed = torch.bmm(weights[:, None, :], self.latest[idx]).squeeze(1)
        theta[idx] = upload(own, self.device).to(theta.dtype)[:, None] * theta[idx] + mixed
