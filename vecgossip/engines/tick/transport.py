"""Step 2 of the tick engine (paper section III-A, Algorithm 2, line "send"): the freshly trained
models go along their senders' links into the receivers' buffers: one sparse multiply, a
per-link masked gather with weight compression (section III-C2), or message by message under
faults; sharded, the rows a rank's receivers need are fetched from the other ranks first."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from vecgossip.network.mixing import link_list, to_torch_csr

Tensor = torch.Tensor


class Transport:
    """Step 2: sending models into buffers. ``compression``: the probability that each element is
    sent (1: the whole model); ``variances``: whether the buffers keep the received models
    per-layer variances (variance correction reads them)."""

    def __init__(self, state, buffers, wiring, shard, faults, gen: torch.Generator, rng: np.random.Generator,
                 compression: float, variances: bool) -> None:
        self.state, self.buffers, self.wiring, self.shard, self.faults = state, buffers, wiring, shard, faults
        self.gen, self.rng, self.compression, self.variances = gen, rng, compression, variances
        self.layout, self.device, self.n = state.layout, state.theta.device, shard.n
        self.since = np.zeros(self.n, dtype=np.int64)     # faults: tick of the oldest model in each buffer

    def send(self, senders: np.ndarray, online: np.ndarray | None = None, t: int = 0) -> None:
        """The ``senders``' fresh models into their receivers' buffers along the active links."""
        if self.faults is not None:
            self.send_faulty(senders, online, t)
            return
        every = senders.size == self.n
        if self.compression < 1.0:
            self.send_compressed(senders, every)
            return
        sent, cols = self.fetch(senders, every)
        a_sub, counts = self.wiring.send.select(cols)
        self.buffers.receive(a_sub, counts, sent, self.layout)

    def fetch(self, senders: np.ndarray, every: bool) -> tuple[Tensor, np.ndarray | None]:
        """The models sent this tick that this rank's receivers need, (C, P), and their senders
        (C,) ascending (None: every node's, in node order). One process: the senders' rows.
        Sharded: ``all_gather`` brings every sender's row; ``all_to_all`` only the rows with a
        receiver on this rank (a dense send operator, used when every node sends on a dense
        graph, needs nearly all rows anyway and takes the all_gather path)."""
        sh, theta, dev = self.shard, self.state.theta, self.device
        if not sh.sharded:
            return (theta, None) if every else (theta[torch.from_numpy(senders).to(dev)], senders)
        blk = sh.block(senders)
        mine = senders[blk] - sh.lo
        own = theta if mine.size == sh.size else theta[torch.from_numpy(mine).to(dev)]
        if sh.exchange == "all_gather" or (every and self.wiring.send.dense):
            return sh.gather_rows(own, sh.counts(senders)), None if every else senders
        sub = self.wiring.a_full[:, senders].tocoo()                   # receivers (global) x senders
        need = np.zeros((sh.world, senders.size), dtype=bool)   # need[r, j]: rank r receives from j
        need[sh.owner(sub.row), sub.col] = True
        cols = senders[need[sh.rank]]
        got = sh.exchange_rows(own, [np.flatnonzero(need[r, blk]) for r in range(sh.world)], sh.counts(cols))
        return got, cols

    def send_compressed(self, senders: np.ndarray, every: bool) -> None:
        """Step 2 with weight compression. The masks are drawn link by link in the one-process
        order over ALL links (so the answer does not depend on the shards); each rank applies
        those into its own nodes."""
        sh = self.shard
        if not sh.sharded:
            recv, send = self.wiring.send.edges(None if every else senders)
            self.buffers.receive_compressed(recv, send, self.state.theta, self.compression,
                                            self.layout, self.gen, self.rng, self.variances)
            return
        recv, send = link_list(self.wiring.a_full, None if every else senders)
        mine = (recv >= sh.lo) & (recv < sh.hi)
        src, cols = self.fetch(senders, every)
        row = np.zeros_like(send)
        row[mine] = send[mine] if cols is None else np.searchsorted(cols, send[mine])
        dev = self.device
        self.buffers.receive_compressed(torch.from_numpy(np.where(mine, recv - sh.lo, 0)).to(dev),
                                        torch.from_numpy(row).to(dev), self.state.theta, self.compression,
                                        self.layout, self.gen, self.rng, self.variances, src=src, mine=mine)

    def send_faulty(self, senders: np.ndarray, online: np.ndarray, t: int) -> None:
        """Step 2 with faults: the messages are the links out of ``senders`` in (sender, receiver)
        order; each arrives if its receiver is online and it is not dropped (faults.kept, one draw
        per message in that order); the rest are counted as lost."""
        recv, send = self.wiring.send.edges(senders)
        recv, send = recv.cpu().numpy(), send.cpu().numpy()
        order = np.lexsort((recv, send))
        recv, send = recv[order], send[order]
        keep = online[recv] & self.faults.kept(recv.size)
        self.faults.count(recv.size, recv.size - int(keep.sum()))
        recv, send = recv[keep], send[keep]
        was_empty = (self.buffers.count == 0).cpu().numpy()
        dev = self.device
        if self.compression < 1.0:
            self.buffers.receive_compressed(torch.from_numpy(recv).to(dev), torch.from_numpy(send).to(dev),
                                            self.state.theta, self.compression, self.layout, self.gen,
                                            self.rng, self.variances)
        else:
            cols = np.searchsorted(senders, send)                  # column = position among senders
            dtype = self.state.theta.dtype                         # float32 runs; float64 in the tests' twins
            a = sp.coo_matrix((np.ones(recv.size), (recv, cols)), shape=(self.state.n, senders.size))
            counts = torch.from_numpy(np.bincount(recv, minlength=self.state.n)).to(dev, dtype)
            self.buffers.receive(to_torch_csr(a, dev, dtype), counts, self.state.theta[torch.from_numpy(senders).to(dev)],
                                 self.layout)
        got = np.zeros(self.state.n, dtype=bool)
        got[recv] = True
        self.since[got & was_empty] = t
