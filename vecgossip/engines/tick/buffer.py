"""The model buffer of every node, as running sums (paper Algorithm 2; docs: Paper 1).

A node's buffer is a multiset of received models. Eq. 1 needs only their mean and Algorithm 3
only the mean of their per-layer variances, so each buffer is held as
``total`` (N, P) = sum of received models, ``count`` (N,) and ``var_total`` (N, L) = sum of the
received models' per-layer weight variances. This equals the list semantics exactly, including a
sender that appears twice in one buffer (it is simply added twice).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from vecgossip.engines.tick.sparse_send import deliver_cpu, fill_in, receive_sparse, sent_positions
from vecgossip.core.correction import layer_variance, rescale_
from vecgossip.network.mixing import gather_sum, gather_sum_into
from vecgossip.core.state import Layout

Tensor = torch.Tensor


@dataclass
class Buffers:
    total: Tensor      # (N, P)
    count: Tensor      # (N,) received models, in the state's dtype
    var_total: Tensor  # (N, L)

    @staticmethod
    def empty(n: int, p: int, n_layers: int, device: torch.device | str,
              dtype: torch.dtype = torch.float32) -> "Buffers":
        return Buffers(torch.zeros(n, p, device=device, dtype=dtype), torch.zeros(n, device=device, dtype=dtype),
                       torch.zeros(n, n_layers, device=device, dtype=dtype))

    def receive(self, a_sub: Tensor, counts: Tensor, sent: Tensor, layout: Layout) -> None:
        """Deliver the senders' models ``sent`` (M, P) through A[:, senders] (N, M) sparse."""
        gather_sum_into(self.total, a_sub, sent)
        self.count += counts
        self.var_total += gather_sum(a_sub, layer_variance(sent, layout))

    def receive_compressed(self, recv: Tensor, send: Tensor, theta: Tensor, p: float, layout: Layout,
                           generator: torch.Generator, rng: np.random.Generator | None = None,
                           variances: bool = True, links_per_chunk: int = 4, src: Tensor | None = None,
                           mine: np.ndarray | None = None, fused: bool | None = None) -> None:
        """Weight-compressed gossip (paper section III-C2): along every link send -> recv (E,), each
        element of the sender's model arrives independently with probability p; the receiver fills
        the unsent elements with its own current weights. Sparse: ~p x P random draws and touched
        elements per link (:mod:`vecgossip.engines.tick.sparse_send`): on the CPU one fused numba pass
        (:func:`~vecgossip.engines.tick.sparse_send.deliver_cpu`; a link's positions come from a counter-based
        generator keyed by one draw of ``rng`` (else ``generator``) and the link's index), on a GPU
        torch ops a few links at a time (:func:`~vecgossip.engines.tick.sparse_send.sent_positions`; measured:
        benchmarks/compression.py). ``variances=False`` leaves ``var_total`` alone (only variance
        correction reads it). ``fused``: force the CPU kernel (True) or the torch path (False).

        Sharded (:mod:`vecgossip.runtime.shard`): ``recv``/``send`` list the tick's links of ALL ranks, so
        the masks are drawn in the one-process order; ``mine`` (E,) marks those into this rank's
        nodes (``recv``: their rows here), whose senders' models are the rows ``send`` of ``src``."""
        keep = None if mine is None else torch.from_numpy(mine).to(recv.device)
        r_mine, s_mine = (recv, send) if keep is None else (recv[keep], send[keep])
        if (theta.device.type == "cpu" if fused is None else fused) and p < 1:   # one fused pass
            key = (int(rng.integers(0, 2**63)) if rng is not None
                   else int(torch.randint(0, 2**62, (1,), generator=generator)))
            link = np.arange(recv.numel()) if mine is None else np.flatnonzero(mine)
            deliver_cpu(self.total, self.var_total, r_mine, s_mine, link, theta, p, key, layout, variances, src)
            self.count += torch.bincount(r_mine, minlength=self.count.numel()).to(self.count.dtype)
            return
        mean_r, var_r = fill_in(self.total, r_mine, theta, layout, variances)
        done = 0
        for lo in range(0, recv.numel(), links_per_chunk):
            part = slice(lo, lo + links_per_chunk)
            pos = sent_positions(recv[part].numel(), theta.shape[1], p, generator, theta.device, rng=rng)
            if keep is not None:
                c = int(mine[part].sum())
                if c == 0:
                    continue
                if c < pos.shape[0]:
                    pos = pos[keep[part]]
            sl = slice(done, done + pos.shape[0])
            done += pos.shape[0]
            receive_sparse(self.total, self.var_total, r_mine[sl], s_mine[sl], theta, pos, layout,
                           None if mean_r is None else mean_r[sl], None if var_r is None else var_r[sl], src)
        self.count += torch.bincount(r_mine, minlength=self.count.numel()).to(self.count.dtype)

    def clear(self, nodes: Tensor) -> None:
        self.total[nodes] = 0
        self.count[nodes] = 0
        self.var_total[nodes] = 0


def eq1_average(own: Tensor, total: Tensor, count: Tensor, beta: float) -> Tensor:
    """Eq. 1: new = beta * own + (1 - beta) * mean(buffer). own/total (M, P), count (M,)."""
    return torch.lerp(total / count.unsqueeze(1), own, beta)


def average_full(theta: Tensor, buf: Buffers, buffer_size: Tensor, beta: float,
                 correction: bool, layout: Layout, impl: str = "auto", ready: Tensor | None = None,
                 whole: bool | None = None) -> Tensor:
    """Step 3 of a tick: every node whose buffer holds >= its buffer_size models averages with
    Eq. 1 (then Algorithm 3 if ``correction``) and empties its buffer. ``ready`` (N,) bool
    replaces that rule when given (faults: online nodes, full or timed-out buffers). Returns the
    (M,) indices of the nodes that averaged. ``whole``: whether every node of the simulation
    averages (a shard's rows are not all of them; None: these rows are)."""
    if ready is None:
        ready = buf.count >= buffer_size
    nodes = torch.nonzero(ready & (buf.count > 0)).flatten()
    m = nodes.numel()
    if m == 0:
        return nodes
    if (m == theta.shape[0]) if whole is None else whole:  # synchronous rounds: every node averages; stay in place, no gathers
        count = buf.count.unsqueeze(1)
        theta.lerp_(buf.total.div_(count), 1.0 - beta)                         # Eq. 1 in place
        if correction:
            rescale_(theta, buf.var_total / count, layout, impl)
        buf.total.zero_()
        buf.count.zero_()
        buf.var_total.zero_()
        return nodes
    count = buf.count[nodes]
    new = eq1_average(theta[nodes], buf.total[nodes], count, beta)              # (M, P)
    if correction:
        rescale_(new, buf.var_total[nodes] / count.unsqueeze(1), layout, impl)
    theta[nodes] = new
    buf.clear(nodes)
    return nodes
