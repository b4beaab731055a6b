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

from vecgossip.core.correction import layer_variance, rescale_
from vecgossip.core.device import gpu_path, upload
from vecgossip.core.state import Layout
from vecgossip.engines.tick.masked_send import SendPlan, deliver, plan_links
from vecgossip.engines.tick.sparse_send import deliver_cpu
from vecgossip.network.mixing import gather_sum, gather_sum_into

Tensor = torch.Tensor


@dataclass
class Buffers:
    total: Tensor      # (N, P)
    count: Tensor      # (N,) received models, in the state's dtype
    var_total: Tensor  # (N, L)
    held: np.ndarray | None = None   # (N,) the host's copy of ``count``: who averages is decided on the
    #                                  host, with no read of the device (None: unknown, read from it)

    @staticmethod
    def empty(n: int, p: int, n_layers: int, device: torch.device | str,
              dtype: torch.dtype = torch.float32) -> "Buffers":
        return Buffers(torch.zeros(n, p, device=device, dtype=dtype), torch.zeros(n, device=device, dtype=dtype),
                       torch.zeros(n, n_layers, device=device, dtype=dtype), np.zeros(n))

    def add_counts(self, counts: np.ndarray | Tensor) -> None:
        """``count += counts`` (N,): host counts (or device ones carrying their host copy,
        :func:`~vecgossip.core.device.with_host`) keep the host's copy; other device ones make it
        unknown."""
        if isinstance(counts, np.ndarray):
            if self.held is not None:
                self.held += counts
            self.count += upload(counts, self.count.device, self.count.dtype)
            return
        host = getattr(counts, "_host_copy", None)
        if host is None:
            self.held = None
        elif self.held is not None:
            self.held += host
        self.count += counts

    def receive(self, a_sub: Tensor, counts: np.ndarray | Tensor, sent: Tensor, layout: Layout,
                variances: bool = True) -> None:
        """Deliver the senders' models ``sent`` (M, P) through A[:, senders] (N, M) sparse;
        ``counts`` (N,) the models each receiver gets (host counts keep :attr:`held`).
        ``variances=False`` leaves ``var_total`` alone (only variance correction reads it)."""
        gather_sum_into(self.total, a_sub, sent)
        self.add_counts(counts)
        if variances:
            self.var_total += gather_sum(a_sub, layer_variance(sent, layout))

    def receive_compressed(self, recv: np.ndarray | Tensor, send: np.ndarray | Tensor, theta: Tensor, p: float,
                           layout: Layout, generator: torch.Generator, rng: np.random.Generator | None = None,
                           variances: bool = True, src: Tensor | None = None, mine: np.ndarray | None = None,
                           fused: bool | None = None, plan: SendPlan | None = None) -> None:
        """Weight-compressed gossip (paper section III-C2): along every link send -> recv (E,) (host
        arrays, or tensors), each element of the sender's model arrives independently with
        probability p; the receiver fills the unsent elements with its own current weights. One
        draw of ``rng`` (else ``generator``) keys the tick; link e's mask depends on (key, e) only.
        On the CPU one fused numba pass over the sent positions alone
        (:func:`~vecgossip.engines.tick.sparse_send.deliver_cpu`); on a GPU's path one kernel for
        every link (:func:`~vecgossip.engines.tick.masked_send.deliver`; ``plan``: the links
        grouped by receiver, made here when not given). ``variances=False`` leaves ``var_total``
        alone (only variance correction reads it). ``fused``: force the CPU kernel (True) or the
        GPU's path (False).

        Sharded (:mod:`vecgossip.runtime.shard`): ``recv``/``send`` list the tick's links of ALL ranks
        (their ids are their positions); ``mine`` (E,) marks those into this rank's nodes
        (``recv``: their rows here), whose senders' models are the rows ``send`` of ``src``."""
        r_np, s_np = (x.cpu().numpy() if isinstance(x, Tensor) else np.asarray(x) for x in (recv, send))
        link = np.arange(r_np.size) if mine is None else np.flatnonzero(mine)
        if mine is not None:
            r_np, s_np = r_np[mine], s_np[mine]
        key = (int(rng.integers(0, 2**63)) if rng is not None
               else int(torch.randint(0, 2**62, (1,), generator=generator)))
        if (not gpu_path(theta) if fused is None else fused) and p < 1:     # one fused pass on the CPU
            deliver_cpu(self.total, self.var_total, torch.from_numpy(r_np), torch.from_numpy(s_np), link, theta, p,
                        key, layout, variances, src)
            self.add_counts(np.bincount(r_np, minlength=self.count.numel()).astype(np.float64))
            return
        if plan is None:
            plan = plan_links(r_np, s_np, link, self.count.numel(), theta.device, self.count.dtype)
        deliver(self.total, self.var_total, self.count, plan, theta, p, key, layout, variances, src)
        if self.held is not None:
            self.held += plan.per_recv

    def clear(self, nodes: np.ndarray | Tensor, total: bool = True) -> None:
        """Empty the buffers of ``nodes`` (host indices, or a device tensor); ``total=False``: their
        sums are already zero (:func:`average_rows_cpu` emptied them)."""
        if self.held is not None:
            self.held[nodes if isinstance(nodes, np.ndarray) else nodes.cpu().numpy()] = 0
        idx = upload(nodes, self.count.device) if isinstance(nodes, np.ndarray) else nodes
        if total:
            self.total[idx] = 0
        self.count[idx] = 0
        self.var_total[idx] = 0


def eq1_average(own: Tensor, total: Tensor, count: Tensor, beta: float) -> Tensor:
    """Eq. 1: new = beta * own + (1 - beta) * mean(buffer). own/total (M, P), count (M,)."""
    return torch.lerp(total / count.unsqueeze(1), own, beta)


def average_rows_cpu(theta: Tensor, total: Tensor, count: Tensor, nodes: np.ndarray, beta: float) -> None:
    """Eq. 1 for the ``nodes`` (host indices) of a CPU state, in place and in one pass over their
    rows of ``theta`` and ``total`` (which it empties): :func:`vecgossip.core.row_kernels.average_rows`,
    no gather of the rows and no write-back (the GPU's path: :func:`eq1_average` on gathered rows)."""
    from vecgossip.core.jit import use_torch_threads
    from vecgossip.core.row_kernels import average_rows, scalar
    use_torch_threads()
    th = theta.detach().numpy()
    b = scalar(beta, th)
    average_rows(th, total.numpy(), count.numpy(), np.ascontiguousarray(nodes, dtype=np.int64), b, 1 - b)


def average_full(theta: Tensor, buf: Buffers, buffer_size: np.ndarray | Tensor, beta: float,
                 correction: bool, layout: Layout, impl: str = "auto", ready: np.ndarray | Tensor | None = None,
                 whole: bool | None = None) -> np.ndarray:
    """Step 3 of a tick: every node whose buffer holds >= its buffer_size models averages with
    Eq. 1 (then Algorithm 3 if ``correction``) and empties its buffer. ``ready`` (N,) bool
    replaces that rule when given (faults: online nodes, full or timed-out buffers). Returns the
    (M,) indices of the nodes that averaged (host). ``whole``: whether every node of the
    simulation averages (a shard's rows are not all of them; None: these rows are).

    With the buffers' host counts (:attr:`Buffers.held`) and host ``buffer_size``/``ready``, who
    averages is decided on the host and the device is never read (the engine's case); given
    device tensors, it reads the device once (``nonzero``). Some nodes, on the CPU and without
    correction: :func:`average_rows_cpu` on their rows where they lie; else their rows gathered,
    averaged (:func:`eq1_average`) and written back."""
    if buf.held is not None and isinstance(buffer_size, np.ndarray) and not isinstance(ready, Tensor):
        due = (buf.held >= buffer_size) if ready is None else ready
        nodes = np.flatnonzero(due & (buf.held > 0))
    else:
        due = (buf.count >= torch.as_tensor(buffer_size, device=buf.count.device)) if ready is None \
            else torch.as_tensor(ready, device=buf.count.device)
        nodes = torch.nonzero(due & (buf.count > 0)).flatten().cpu().numpy()
    m = nodes.size
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
        if buf.held is not None:
            buf.held[:] = 0
        return nodes
    if not correction and not gpu_path(theta) and theta.is_contiguous() and buf.total.is_contiguous():
        average_rows_cpu(theta, buf.total, buf.count, nodes, beta)     # the rows where they lie, one pass
        buf.clear(nodes, total=False)
        return nodes
    idx = upload(nodes, theta.device)
    count = buf.count[idx]
    new = eq1_average(theta.index_select(0, idx), buf.total.index_select(0, idx), count, beta)   # (M, P)
    if correction:
        rescale_(new, buf.var_total[idx] / count.unsqueeze(1), layout, impl)
    theta.index_copy_(0, idx, new)
    buf.clear(nodes)
    return nodes
