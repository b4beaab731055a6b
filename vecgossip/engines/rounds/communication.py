"""Step 2 of the round engine over a graph (paper 2's gossip, x <- W_t x, and any W x an algorithm
asks for): round t's mixing matrix W_t (a static graph's, or redrawn every round), its delivery
under faults (ONE realization per round, gossip step and W, shared by every tensor mixed then),
the messages it takes, the sharded product, and the spectral gaps of the first rounds."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from vecgossip.core.faults import Fates, Faults, faulty_weights, matrix_key, without
from vecgossip.network.mixing import MixingSchedule, RowMixer, mix_, mixing_operator, spectral_gap
from vecgossip.engines.rounds.outbox import Outbox, merged
from vecgossip.network.neighbourhoods import Neighbourhoods, in_degree, neighbourhoods, slots
from vecgossip.runtime.shard import Shard

Tensor = torch.Tensor
GAP_ROUNDS = 20   # topology=random: the spectral gap reported is the mean over the first 20 rounds' W
# what a lost message's weight becomes, by the kind of W the algorithm mixes with (faults.faulty_weights)
LOSS_RULE = {"doubly_stochastic": "receiver", "row_stochastic": "renormalise", "column_stochastic": "sender"}


class Communication:
    """W_t x for this process's rows. ``kind``: the algorithm's kind of W (its ``mixing``): what
    a lost message's weight becomes. ``online`` (m,): who is online this round (the engine sets
    it each round under faults)."""

    def __init__(self, mixing: MixingSchedule, shard: Shard, faults: Faults | None, kind: str,
                 device: torch.device, dtype: torch.dtype) -> None:
        self.mixing, self.shard, self.faults, self.kind = mixing, shard, faults, kind
        self.device, self.m = device, shard.n
        self.online = np.ones(self.m, dtype=bool)
        self.gaps: list[float] = []         # spectral gap of W_t (static graphs: once)
        self.mixer = RowMixer(shard, device, dtype)   # sharded W x
        self.scratch: Tensor | None = None  # the models' gossip buffer (ping-pong)
        self._step: tuple | None = None     # ((t, step), its Fates, {digest: realized}, {digest: timed}, lost keys)
        self._nb: tuple | None = None       # (the realized W, its Neighbourhoods)
        self.static: Neighbourhoods | None = None   # the topology's links (per-edge state's slots)
        self.outbox: Outbox | None = None   # clock.enabled: the messages actually sent (the engine posts them)
        self.step_timer = None              # clock.churn on a global barrier: steps timed as sent (:mod:`.timing`)

    @property
    def dtype(self) -> torch.dtype:
        """The state's dtype (the mixing schedule's: tests run an engine's state in float64)."""
        return self.mixing.dtype

    def realized(self, t: int, step: int = 0, w=None) -> tuple[Tensor | None, sp.csr_matrix, int]:
        """Gossip step ``step`` of round t: (W as this process's operator (None when sharded),
        W as scipy CSR, the messages attempted). W is the topology's W_t, or ``w`` (a scipy
        sparse or dense (m, m) array the algorithm made, e.g. one it draws each round). Under
        faults, ONE fate per message and step (faults.Fates): every matrix mixed at that step, in
        any order, the same object or an equal copy, loses the same messages, and a matrix and its
        tensors share its realization (one message carries them all); a lost message's weight follows the
        algorithm's kind of W: doubly stochastic, the receiver uses its own model in its place;
        row stochastic, the receiver averages what arrived; column stochastic (push-sum), the
        sender keeps the mass. Without faults the messages are W's off-diagonal entries."""
        if self._step is None or self._step[0] != (t, step):      # a new step: fresh fates, no matrix yet
            self._step = ((t, step), Fates(self.m), {}, {}, None)
        _, fates, seen, timed, lost = self._step
        given, key = (None, "topology") if w is None else matrix_key(w)
        if key not in seen:                                      # this matrix (or an equal copy) at this step
            op, w_sp = self.given(given) if w is not None else self.topology_w(t, step)
            if self.faults is not None:
                w_sp, attempted = faulty_weights(w_sp, self.online, self.faults, LOSS_RULE[self.kind], fates)
                op = mixing_operator(w_sp, self.device, self.dtype)
            else:
                attempted = int(w_sp.nnz - np.count_nonzero(w_sp.diagonal()))
            seen[key] = (op, w_sp, attempted)
        if lost is None or not lost.size:
            return seen[key]
        if key not in timed:                                     # churn: without what was cut off
            op, w_sp, attempted = seen[key]
            w_sp = without(w_sp, lost, LOSS_RULE[self.kind])
            op = None if self.shard.sharded else mixing_operator(w_sp, self.device, self.dtype)
            timed[key] = (op, w_sp, attempted)
        return timed[key]

    def topology_w(self, t: int, step: int) -> tuple[Tensor, sp.csr_matrix]:
        """The topology's W_t (and the spectral gap of the first rounds' W)."""
        op, _, w_sp = self.mixing.at(t)
        if step == 0 and t < GAP_ROUNDS and (t == 0 or self.mixing.graphs is not None) and len(self.gaps) <= t:
            self.gaps.append(spectral_gap(w_sp))
        return op, w_sp

    def given(self, w) -> tuple[Tensor | None, sp.csr_matrix]:
        """An algorithm's own W, checked."""
        w_sp = sp.csr_matrix(w, dtype=np.float64)
        if w_sp.shape != (self.m, self.m):
            raise ValueError(f"W must be ({self.m}, {self.m}), got {w_sp.shape}")
        return (None if self.shard.sharded else mixing_operator(w_sp, self.device, self.dtype)), w_sp

    def neighbourhoods(self, t: int, step: int = 0, w=None) -> tuple[Neighbourhoods, sp.csr_matrix]:
        """The realized W of that step (:meth:`realized`: the same lost messages as every mix of
        the step) as this rank's receivers' neighbourhoods, and W itself."""
        _, w_sp, _ = self.realized(t, step, w)
        if self._nb is None or self._nb[0] is not w_sp:
            self._nb = (w_sp, neighbourhoods(w_sp, self.shard.lo, self.shard.hi, self.device, self.dtype))
        return self._nb[1], w_sp

    def slots(self, nb: Neighbourhoods) -> Tensor:
        """(R, d) each message's slot among its receiver's neighbours in the topology (the static
        graph's, ascending: where per-edge state keeps that link)."""
        return slots(nb, self.static_links())

    def static_links(self) -> Neighbourhoods:
        """The topology's own links (a static graph: W_0 before faults), d_max the whole graph's."""
        if self.static is None:
            _, _, w0 = self.mixing.at(0)
            width = int(in_degree(w0).max()) if w0.shape[0] else 0
            self.static = neighbourhoods(w0, self.shard.lo, self.shard.hi, self.device, self.dtype, width)
        return self.static

    def mix(self, x: Tensor, t: int, step: int = 0, w=None) -> Tensor:
        """W x for this process's rows ``x`` (m', ...) of any node-first tensor, a new tensor."""
        op, w_sp, _ = self.realized(t, step, w)
        flat = x.reshape(x.shape[0], -1)
        if self.shard.sharded:
            return self.mixer(w_sp, flat).reshape(x.shape)
        out = torch.empty_like(flat)
        mix_(out, op, flat)
        return out.reshape(x.shape)

    def post(self, t: int, step: int, w, size: np.ndarray, who: str = "") -> None:
        """Under the clock: the messages of the realized matrix of (t, step, w) leave, each of its
        sender's ``size`` (m,) bytes (:class:`~.outbox.Outbox`). A read (``neighbourhoods``,
        ``messages``) posts nothing. Under churn (:attr:`step_timer`) the step is timed now and
        what a node leaving cuts off is lost from its realizations (call before mixing)."""
        if self.outbox is None:
            return
        self.realized(t, step, w)
        (_, _, seen, _, _), key = self._step, ("topology" if w is None else matrix_key(w)[1])
        self.outbox.post(step, seen[key][1], size)
        if self.step_timer is not None:
            s, r, b = merged(self.outbox.posted[step], self.m)
            lost = self.step_timer.lost(step, s, r, b, who)
            self._step = self._step[:3] + ({}, np.sort(lost))

    def gossip(self, x: Tensor, t: int, steps: int, size: np.ndarray | None = None) -> tuple[Tensor, float, int]:
        """``steps`` products x <- W_t x of the models ``x`` (m', P), ping-ponging with a kept
        buffer (each step's messages posted of ``size`` (m,) bytes under the clock); returns (the
        result, round t's mean degree, the messages attempted)."""
        _, degree, _ = self.mixing.at(t)
        attempted = 0
        for step in range(steps):
            if size is not None:
                self.post(t, step, None, size)
            op, w_q, k = self.realized(t, step)
            attempted += k
            if self.shard.sharded:
                x = self.mixer(w_q, x)
                continue
            out = self.scratch if self.scratch is not None and self.scratch.shape == x.shape else torch.empty_like(x)
            mix_(out, op, x)
            x, self.scratch = out, x
        return x, degree, attempted
