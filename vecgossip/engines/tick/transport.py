"""Step 2 of the tick engine (paper section III-A, Algorithm 2, line "send"): the freshly trained
models go along their senders' links into the receivers' buffers: one sparse multiply, a
per-link masked gather with weight compression (section III-C2), or message by message under
faults; sharded, the rows a rank's receivers need are fetched from the other ranks first."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from vecgossip.algorithms.base import Block
from vecgossip.core.correction import layer_variance
from vecgossip.core.device import gpu_path, upload
from vecgossip.engines.gather import checked_forge
from vecgossip.engines.tick.masked_send import plan_links
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
        self._plan: tuple | None = None                   # (the send operator, its links grouped by receiver)
        self.adversary = None                             # Byzantine senders (adversaries/): what they forge

    def send(self, senders: np.ndarray, online: np.ndarray | None = None, t: int = 0) -> None:
        """The ``senders``' fresh models into their receivers' buffers along the active links."""
        if self.faults is not None:
            self.send_faulty(senders, online, t)
            return
        if self.adversary is not None and not self.adversary.attack.poisons_data:
            self.send_attacked(senders, t)
            return
        every = senders.size == self.n
        if self.compression < 1.0:
            self.send_compressed(senders, every)
            return
        sent, cols = self.fetch(senders, every)
        a_sub, counts = self.wiring.send.select(cols)
        self.buffers.receive(a_sub, counts, sent, self.layout, self.variances)

    def fetch(self, senders: np.ndarray, every: bool, links: tuple[np.ndarray, np.ndarray] | None = None
              ) -> tuple[Tensor, np.ndarray | None]:
        """The models sent this tick that this rank's receivers need, (C, P), and their senders
        (C,) ascending (None: every node's, in node order). One process: the senders' rows.
        Sharded: ``all_gather`` brings every sender's row; ``all_to_all`` only the rows with a
        receiver on this rank (a dense send operator, used when every node sends on a dense
        graph, needs nearly all rows anyway and takes the all_gather path). ``links``: (global
        receivers, positions in ``senders``) of the messages sent (default: every active link out
        of ``senders``; the tick engine in seconds gives the messages it starts)."""
        sh, theta, dev = self.shard, self.state.theta, self.device
        if not sh.sharded:
            return (theta, None) if every else (theta[upload(senders, dev)], senders)
        blk = sh.block(senders)
        mine = senders[blk] - sh.lo
        own = theta if mine.size == sh.size else theta[upload(mine, dev)]
        if sh.exchange == "all_gather" or (every and self.wiring.send.dense):
            return sh.gather_rows(own, sh.counts(senders)), None if every else senders
        if links is None:
            sub = self.wiring.a_full[:, senders].tocoo()               # receivers (global) x senders
            links = (sub.row, sub.col)
        need = np.zeros((sh.world, senders.size), dtype=bool)   # need[r, j]: rank r receives from j
        need[sh.owner(links[0]), links[1]] = True
        cols = senders[need[sh.rank]]
        got = sh.exchange_rows(own, [np.flatnonzero(need[r, blk]) for r in range(sh.world)], sh.counts(cols))
        return got, cols

    def send_compressed(self, senders: np.ndarray, every: bool) -> None:
        """Step 2 with weight compression. Link e's mask depends on the tick's key and e's place
        in the one-process order over ALL links (so the answer does not depend on the shards);
        each rank applies those into its own nodes. When every node sends, the links grouped by
        receiver (the GPU's plan) are made once per wiring."""
        sh = self.shard
        if not sh.sharded:
            recv, send = link_list(self.wiring.send.a, None if every else senders)
            plan = None
            if every and gpu_path(self.device):
                if self._plan is None or self._plan[0] is not self.wiring.send:
                    self._plan = (self.wiring.send, plan_links(recv, send, np.arange(recv.size), self.n, self.device,
                                                               self.state.theta.dtype))
                plan = self._plan[1]
            self.buffers.receive_compressed(recv, send, self.state.theta, self.compression,
                                            self.layout, self.gen, self.rng, self.variances, plan=plan)
            return
        recv, send = link_list(self.wiring.a_full, None if every else senders)
        mine = (recv >= sh.lo) & (recv < sh.hi)
        src, cols = self.fetch(senders, every)
        row = np.zeros_like(send)
        row[mine] = send[mine] if cols is None else np.searchsorted(cols, send[mine])
        self.buffers.receive_compressed(np.where(mine, recv - sh.lo, 0), row, self.state.theta, self.compression,
                                        self.layout, self.gen, self.rng, self.variances, src=src, mine=mine)

    def send_attacked(self, senders: np.ndarray, t: int) -> None:
        """Step 2 with Byzantine senders (one process, whole models): the honest senders' models
        as always (one sparse product); every link from a Byzantine sender carries what the attack
        forges for its receiver (:meth:`~vecgossip.adversaries.adversary.Adversary.forge`), given
        the block of that receiver's messages this tick (its other senders' models: omniscient)
        and, for an attack with a global view, every node's model."""
        adv, theta, dtype = self.adversary, self.state.theta, self.state.theta.dtype
        byz = adv.byzantine[senders]
        honest = senders[~byz]
        if honest.size:
            sent, cols = self.fetch(honest, honest.size == self.n)
            a_sub, counts = self.wiring.send.select(cols)
            self.buffers.receive(a_sub, counts, sent, self.layout, self.variances)
        if not byz.any():
            return
        recv, send = link_list(self.wiring.send.a, senders)
        hit = np.isin(recv, np.unique(recv[adv.byzantine[send]]))      # receivers a Byzantine node sends to
        recv, send = recv[hit], send[hit]
        order = np.lexsort((send, recv))
        recv, send = recv[order], send[order]
        rows, start, deg = np.unique(recv, return_index=True, return_counts=True)
        width = int(deg.max())
        at = np.searchsorted(rows, recv)
        slot = np.arange(recv.size) - start[at]
        index = np.repeat(rows[:, None], width, 1)                      # padding: the receiver's own row
        index[at, slot] = send
        mask = np.zeros((rows.size, width), dtype=bool)
        mask[at, slot] = True
        forging = mask & adv.byzantine[index]                           # (r, d) the Byzantine links
        adv.look(theta)
        rows_t, index_t = upload(rows, self.device), upload(index, self.device)
        block = Block(rows, rows_t, theta[rows_t], theta[index_t], index_t, upload(mask, self.device),
                      upload(mask / deg[:, None], self.device, dtype), theta.new_zeros(rows.size), None, t)
        msgs = checked_forge(adv.forge, block).msgs                     # (r, d, P)
        take = upload(forging, self.device, dtype)
        self.buffers.total.index_add_(0, rows_t, (msgs * take.unsqueeze(2)).sum(1))
        var = layer_variance(msgs.reshape(-1, msgs.shape[2]), self.layout).view(*forging.shape, -1)
        self.buffers.var_total.index_add_(0, rows_t, (var * take.unsqueeze(2)).sum(1))
        counts = np.zeros(self.state.n)
        counts[rows] = forging.sum(1)
        self.buffers.add_counts(counts)

    def send_faulty(self, senders: np.ndarray, online: np.ndarray, t: int) -> None:
        """Step 2 with faults: the messages are the links out of ``senders`` in (sender, receiver)
        order; each arrives if its receiver is online and it is not dropped (faults.kept, one draw
        per message in that order); the rest are counted as lost."""
        recv, send = link_list(self.wiring.send.a, senders)
        order = np.lexsort((recv, send))
        recv, send = recv[order], send[order]
        keep = online[recv] & self.faults.kept(recv.size)
        self.faults.count(recv.size, recv.size - int(keep.sum()))
        recv, send = recv[keep], send[keep]
        held = self.buffers.held
        was_empty = (held == 0) if held is not None else (self.buffers.count == 0).cpu().numpy()
        dev = self.device
        if self.compression < 1.0:
            self.buffers.receive_compressed(recv, send, self.state.theta, self.compression, self.layout, self.gen,
                                            self.rng, self.variances)
        else:
            cols = np.searchsorted(senders, send)                  # column = position among senders
            dtype = self.state.theta.dtype                         # float32 runs; float64 in the tests' twins
            a = sp.coo_matrix((np.ones(recv.size), (recv, cols)), shape=(self.state.n, senders.size))
            counts = np.bincount(recv, minlength=self.state.n).astype(np.float64)
            self.buffers.receive(to_torch_csr(a, dev, dtype), counts, self.state.theta[upload(senders, dev)],
                                 self.layout, self.variances)
        got = np.zeros(self.state.n, dtype=bool)
        got[recv] = True
        self.since[got & was_empty] = t
