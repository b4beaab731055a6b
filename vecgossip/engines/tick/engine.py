"""The tick engine: asynchronous gossip learning with model buffers (paper section III-A,
Algorithm 2). Every tick, in this order:

1. every node whose training tick has come trains ONE SGD step on a fresh batch, then schedules
   its next training tick += T_acq (fixed, or uniform in [lo, hi] per draw); all train at tick 0;
2. each freshly trained model is sent along the node's links into the receivers' buffers (one
   sparse multiply; or, with weight compression, a chunked per-link masked gather);
3. every node whose buffer holds >= buffer_size models averages with Eq. 1 (+ Algorithm 3 when
   correction is on) and empties its buffer; a relay server (federated learning, Algorithm 1)
   sends its fresh average straight back, and its clients average again;
4. metrics every ``eval_every`` ticks; in the transfer-learning variant, every ``tl.period`` ticks
   each node tests itself on its own label mix and adds or drops one peer (section III-C3).

Steps 1 and 3 are here, with the services an algorithm gets; the engine is a composition of
parts with their own state: the :class:`~.schedule.Schedule` (who trains when), the
:class:`~.wiring.Wiring` (the active links as operators), the :class:`~.transport.Transport`
(step 2), the :class:`~.measures.Measures` and :class:`~.measures.PeerRule` (step 4); its
checkpoint is :mod:`.state`, its clock (the run loop's steps) :mod:`.clock`. The same engine runs
every system of the paper; they differ only in configuration.

Sharded over processes (:mod:`vecgossip.runtime.shard`), the tensors hold this rank's nodes only
(``state``, ``buffers``: rows ``shard.lo .. shard.hi``) while the schedules, links, label mixes and
random draws cover all N nodes on every rank; with one process the shard is everything and every
collective is a no-op.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from vecgossip.algorithms.base import Streams, TickAlgorithm
from vecgossip.core.faults import Fates, Faults, faulty_weights, matrix_key
from vecgossip.core.device import upload
from vecgossip.core.errors import ConfigError
from vecgossip.core.guard import Diverged, nonfinite
from vecgossip.core.optim import SGDConfig, loss_and_grad, sgd_update
from vecgossip.core.state import NodeState, allocate_declared
from vecgossip.data.augment import draw_crops
from vecgossip.data.dataset import Dataset
from vecgossip.data.sampling import Shards, sample_indices, sample_labels
from vecgossip.engines.gather import gather
from vecgossip.engines.group import Group
from vecgossip.engines.tick.buffer import Buffers, average_full
from vecgossip.engines.tick.config import TickOptions
from vecgossip.engines.tick.measures import EvalSet, Measures, PeerRule
from vecgossip.engines.tick.schedule import NEVER, Schedule  # noqa: F401  (NEVER: a node that never trains)
from vecgossip.engines.tick.training import train_due, train_rows
from vecgossip.engines.tick.transport import Transport
from vecgossip.engines.tick.wiring import Wiring
from vecgossip.models.execution import Decision
from vecgossip.network.mixing import RowMixer
from vecgossip.network.neighbourhoods import Neighbourhoods, in_degree, neighbourhoods, slots
from vecgossip.network.peers import Links
from vecgossip.runtime.shard import Shard

Tensor = torch.Tensor


@dataclass
class TickData:
    """What the nodes train and are evaluated on: ``train`` (sampled with replacement from each
    node's label mix ``label_probs`` (N, C), None: IID; or from its own disjoint ``shards``) in
    batches of ``batch_size``; ``evals`` the evaluation images."""

    train: Dataset
    evals: EvalSet
    batch_size: int = 64
    label_probs: Tensor | None = None
    shards: Shards | None = None


class TickEngine:
    """Holds the stacked node state and advances it tick by tick; all per-node work is batched.
    ``options``: the ``engine`` group (its chunks resolved to ints); ``algorithm``: what is sent
    and merged (:class:`~vecgossip.algorithms.TickAlgorithm`: its ``R``, ``compression``,
    ``correction``, ``server`` and ``peer_rule`` configure the buffers, the send rule, a relay
    server and the peer rule)."""

    def __init__(self, options: TickOptions, algorithm: TickAlgorithm, state: NodeState, links: Links, forward,
                 sgd: SGDConfig, data: TickData, generator: torch.Generator, rng: np.random.Generator,
                 faults: Faults | None = None, shard: Shard | None = None, random: Streams | None = None,
                 execution: Decision | None = None, privacy=None, adversary=None, seconds=None) -> None:
        self.cfg, self.algorithm, self.state, self.forward, self.sgd = options, algorithm, state, forward, sgd
        self.privacy = privacy            # DP-SGD training steps (privacy.*, privacy/private.py), or None
        self.adversary = adversary        # Byzantine nodes and their attack (adversaries/), or None
        self.seconds = seconds            # virtual seconds (clock.*, engines/tick/timed/), or None
        self.data, self.gen, self.rng = data, generator, rng
        self.train_chunk, self.eval_chunk = int(options.train_chunk), int(options.eval_chunk)
        self.faults = faults if faults is not None and faults.cfg.active else None
        self.shard = shard if shard is not None else Shard(state.n)     # state: this rank's rows
        self.random = random if random is not None else Streams.of(0, state.theta.device)   # the algorithm's
        self.execution = execution if execution is not None else Decision()              # model.exec
        self.n, self.layout, self.device = self.shard.n, state.layout, state.theta.device
        self.node_ids = np.arange(self.shard.lo, self.shard.hi)   # the global index of each row
        self.server = 0 if algorithm.server else None              # federated learning: node 0 relays
        self.tl = options.tl if algorithm.peer_rule else None
        self.diverged = np.zeros(self.n, dtype=bool)                # isolated nodes
        self.guard = True          # the divergence guard's row sums (benchmarks/reliability.py times it)
        self.t_first_average: int | None = None
        self.build_parts(links)

    def build_parts(self, links: Links) -> None:
        """The engine's parts, each with its own state."""
        st, sh = self.state, self.shard
        self.buffers = Buffers.empty(st.n, st.theta.shape[1], len(self.layout.weights), self.device, st.theta.dtype)
        self.wiring = Wiring(links, sh, self.algorithm.R, self.device, st.theta.dtype)
        allocate_declared(st, self.algorithm, int(in_degree(self.a_full).max()) if self.n else 0)
        parts = (st, self.buffers, self.wiring, sh, self.faults, self.gen, self.rng, self.algorithm.compression,
                 self.algorithm.correction)
        if self.seconds is None:
            self.schedule = Schedule(self.n, self.cfg.t_acq_range, self.rng, self.faults, self.server)
            self.transport = Transport(*parts)
        else:                     # ticks are windows of clock.resolution seconds (engines/tick/timed/)
            from vecgossip.engines.tick.timed.transport import TimedTransport
            from vecgossip.engines.tick.timed.windows import SecondsSchedule, message_bytes
            self.schedule = SecondsSchedule(self.n, self.seconds, self.server)
            self.transport = TimedTransport(*parts, clock=self.seconds, schedule=self.schedule,
                                            message_bytes=message_bytes(st.theta.shape[1], st.theta.element_size(),
                                                                        self.algorithm.compression))
            if self.algorithm.inbox == "latest":  # the latest model of each in-neighbour, per link
                self.transport.use_latest(self.a_full)
            self.transport.arrival_weight = self.algorithm.arrival_weight   # weights by staleness (or None)
            self.transport.keep_arrivals = bool(self.algorithm.arrivals)    # ctx.arrivals: a log of deliveries
        self.measures = Measures(st, sh, self.forward, self.data.evals, self.eval_chunk, self.server, self.diverged,
                                 self.cfg.threshold)
        self.peer_rule = None if self.tl is None else PeerRule(
            self.tl, self.wiring, st, sh, self.forward, self.data.evals.test, self.data.label_probs, self.eval_chunk,
            self.gen, self.rng, self.diverged)
        self.mixer = RowMixer(sh, self.device, st.theta.dtype)   # ctx.mix
        adv = self.adversary
        self.transport.adversary = adv
        self.poisoned = (adv.mask.to(self.device) if adv is not None and adv.attack.poisons_data
                         else None)   # label flipping: whose training labels are flipped
        if adv is not None:           # the metrics are the honest nodes'
            self.measures.honest = adv.honest
        self._mixed: tuple | None = None          # (tick, its Fates, {matrix digest: realized W}): one fate per message
        self._nb: tuple | None = None             # (the realized W, its Neighbourhoods)

    # -- what tests, benchmarks and the checkpoint read of the parts ---------------------------------
    @property
    def links(self) -> Links:
        return self.wiring.links

    @property
    def a_full(self) -> sp.csc_matrix:
        """(N, N) receiver-by-sender 0/1 matrix of the active links (a service)."""
        return self.wiring.a_full

    @property
    def buffer_size(self) -> Tensor:
        return self.wiring.buffer_size

    @property
    def next_train(self) -> np.ndarray:
        return self.schedule.next_train

    @property
    def train_data(self) -> Dataset:
        return self.data.train

    def rewire(self) -> None:
        self.wiring.rewire()

    def use_forward(self, forward) -> None:
        """Compute with ``forward`` from now on (training, evaluation, the peer rule)."""
        self.forward = self.measures.forward = forward
        if self.peer_rule is not None:
            self.peer_rule.forward = forward

    # -- step 1 -----------------------------------------------------------------------------
    def train_own(self, t: int, s: int):
        """Step 1 through the algorithm's own ``train`` (engine by engine)."""
        due, online = self.schedule.due(t)
        if due is None or not due.size:
            return None
        bad = self.algorithm.train(self, t, due)
        self.schedule.reschedule(due)
        return s, due, bad, online

    def draw(self, nodes: np.ndarray) -> tuple[np.ndarray, Tensor, Tensor | None]:
        """The training draws of tick's ``nodes``: batch indices for all M nodes in one call (so
        results do not depend on the chunk size), and crops when the data set augments. Sharded,
        every rank draws for all M nodes; returns this rank's (rows, images (M', B), crops)."""
        sh, d = self.shard, self.data
        if d.shards is not None:                                                 # own shard only
            images = d.shards.sample(upload(nodes, self.device), d.batch_size, self.gen)
        else:
            probs = d.label_probs
            if probs is not None and nodes.size < self.n:
                probs = probs[upload(nodes, self.device)]
            labels = sample_labels(probs, nodes.size, d.batch_size, self.gen, self.device, d.train.num_classes)
            images = sample_indices(d.train.index, labels, self.gen)                # (M, B)
        crops = draw_crops(images.shape, d.train.augment, self.gen, self.device) if d.train.augment else None
        blk = sh.block(nodes)                                  # this rank's nodes among them
        return nodes[blk] - sh.lo, images[blk], None if crops is None else crops[blk]

    # -- steps 2 and 3 ------------------------------------------------------------------------
    def after_training(self, t: int, due: np.ndarray, bad: np.ndarray, online: np.ndarray | None) -> None:
        """Steps 2-3 once ``due`` trained: the divergence guard's policy for ``bad`` (raises
        :class:`Diverged` under on_divergence=stop), then the algorithm's sends and merges."""
        if bad.size:
            if self.cfg.on_divergence == "stop":
                raise Diverged(t, bad)
            self.isolate(bad)
            due = due[~self.diverged[due]]
            if due.size == 0:
                return
        self.algorithm.after_train(self, t, due, online)

    def tick(self, t: int) -> bool:
        """Steps 1-3 of tick t for this engine alone (the run loop does this for its whole group).
        Returns whether any node trained."""
        trained = train_due(Group([self]), t, [0])
        for _, due, bad, online in trained:
            self.after_training(t, due, bad, online)
        if not trained and self.seconds is not None:     # a window where only messages arrive
            none = np.zeros(0, dtype=np.int64)
            self.after_training(t, none, self.settle_pairs(t), None)
        return bool(trained)

    def isolate(self, nodes: np.ndarray) -> None:
        """on_divergence=isolate: the nodes stop training and sending; receivers' buffer sizes
        follow their remaining senders (R x current senders), so nobody waits for them."""
        self.diverged[nodes] = True
        self.schedule.stop(nodes)
        self.wiring.cut(nodes)

    # -- services of the algorithm interface (algorithms.base.TickServices) ---------------------
    def rows(self, nodes: np.ndarray) -> np.ndarray:
        """This process's rows (indices into ``state``) of the sorted global ``nodes``."""
        return nodes[self.shard.block(nodes)] - self.shard.lo

    def send_models(self, senders: np.ndarray, online: np.ndarray | None, t: int) -> None:
        """The ``senders``' fresh models into their receivers' buffers (:class:`~.transport.Transport`)."""
        self.transport.send(senders, online, t)

    def average(self, t: int, online: np.ndarray | None, beta: float, correction: bool) -> np.ndarray:
        """Step 3 (Eq. 1, + Algorithm 3): every node whose buffer is full (or, under faults, held
        faults.timeout ticks) merges it; returns this process's rows that averaged (host indices:
        decided from the buffers' host counts, no read of the device)."""
        ready, held, size = None, self.buffers.held, self.wiring.buffer_size_host
        if self.faults is not None:   # online nodes with a full buffer, or one held for faults.timeout ticks
            ready = online & ((held >= size) | (t - self.transport.since >= self.faults.cfg.timeout))
        whole, sh = None, self.shard
        if sh.sharded:            # does every node average (the in-place path)? all ranks agree
            everywhere = sh.sum_int(int(((held >= size) & (held > 0)).sum()))
            whole = everywhere == self.n
        nodes = average_full(self.state.theta, self.buffers, size, beta, correction, self.layout,
                             ready=ready, whole=whole)
        if (everywhere if sh.sharded else nodes.size) and self.t_first_average is None:
            self.t_first_average = t
        return nodes

    def sgd_step(self, nodes: np.ndarray) -> np.ndarray:
        """One step of the configured optimiser (Caffe SGD) for every node in ``nodes`` on a fresh
        minibatch (:meth:`draw`, :func:`train_rows`); returns the nodes whose parameters are no
        longer finite (every rank agrees)."""
        mine, images, crops = self.draw(nodes)
        bad = train_rows(self.state, mine, images, crops, self.train_data, self.forward, [(mine.size, self.sgd)],
                         self.train_chunk, self.guard, flip=self.poisoned)
        return self.shard.union(mine[bad] + self.shard.lo)

    def gradients(self, nodes: np.ndarray) -> Tensor:
        """(M', P) the stacked gradient of the loss of this process's rows of ``nodes`` at their
        current models, each on a fresh minibatch drawn as for training (BatchNorm statistics move
        as in a training forward; zero in their columns), ``train_chunk`` rows at a time."""
        mine, images, crops = self.draw(nodes)
        idx = upload(mine, self.device)
        out = self.state.theta.new_zeros(mine.size, self.state.theta.shape[1])
        for lo in range(0, mine.size, self.train_chunk):
            hi = min(lo + self.train_chunk, mine.size)
            theta = self.state.theta[idx[lo:hi]]
            x, y = self.train_data.train_batch(images[lo:hi], None if crops is None else crops[lo:hi])
            _, grads = loss_and_grad(self.forward, self.layout, theta, x, y, factored=False)
            for spec, g in zip(self.layout.specs, grads):
                out[lo:hi, spec.start:spec.stop] = g.reshape(hi - lo, -1)
            if self.layout.buffers:
                self.state.theta[idx[lo:hi], self.layout.params_size:] = theta[:, self.layout.params_size:]
        return out

    def apply_sgd(self, nodes: np.ndarray, grads: Tensor) -> np.ndarray:
        """The configured optimiser's update (Caffe SGD: weight decay, momentum, the lr policy
        of each node's own step count, bias lr x2) of this process's rows of ``nodes`` with the
        given (M', P) gradient; their step counts advance. Returns the nodes whose parameters
        are no longer finite (every rank agrees)."""
        mine = self.rows(nodes)
        idx = upload(mine, self.device)
        theta, mom, iters = self.state.theta[idx], self.state.momentum[idx], self.state.iters[idx]
        sgd_update(theta, mom, [grads[:, s.start:s.stop].reshape(-1, *s.shape) for s in self.layout.specs],
                   iters, self.layout, self.sgd)
        self.state.theta[idx], self.state.momentum[idx] = theta, mom
        self.state.iters[idx] += 1
        return self.shard.union(mine[nonfinite(theta.sum(1))] + self.shard.lo if self.guard else mine[:0])

    def pairwise_averages(self, nodes: np.ndarray, pairs: list[tuple[int, int]], grads: Tensor) -> np.ndarray:
        """Service: the pairs' atomic averages in order, then the nodes' gradients; in virtual
        seconds each pair is a request and its reply, the average applying when both have arrived
        (:mod:`~.timed.pairs`)."""
        if self.seconds is not None:
            return self.transport.start_pairs(self, nodes, pairs, grads)
        return self.average_pairs(pairs, nodes, grads)

    def send_parts(self, senders: np.ndarray, part_of: Tensor, recipients: np.ndarray, online: np.ndarray | None,
                   t: int, replace_waiting: bool = False, weights: np.ndarray | None = None) -> None:
        """Service: the ``senders``' fresh models cut into parts (``part_of`` (M, P): each
        parameter's part), part f to the nodes ``recipients[:, f]``, each a timed message of its
        part's bytes (:mod:`~.timed.parts`; virtual seconds only)."""
        if self.seconds is None:
            raise RuntimeError("ctx.send_parts times messages in virtual seconds: it needs clock.enabled=true")
        if self.algorithm.inbox != "parts":
            from vecgossip.core.errors import ConfigError
            raise ConfigError(f'{self.algorithm.name()} calls ctx.send_parts: declare inbox = "parts" on the class '
                              "(its receivers keep sums and counts: the memory estimate counts them)")
        self.transport.send_parts(senders, part_of, recipients, online, t, replace_waiting, weights)

    def arrivals(self, nodes: np.ndarray) -> dict[str, np.ndarray]:
        """Service: the messages delivered to ``nodes`` since their last call, each with its sender,
        send and arrival time (virtual seconds; the algorithm sets ``arrivals = True``)."""
        if self.seconds is None or not self.algorithm.arrivals:
            raise RuntimeError("ctx.arrivals needs clock.enabled=true and an algorithm with arrivals = True")
        return self.transport.arrivals(np.asarray(nodes))

    def average_latest(self, nodes: np.ndarray, w) -> None:
        """Service: the ``nodes`` average with the latest model received from each in-neighbour."""
        if self.seconds is None or self.algorithm.inbox != "latest":
            raise RuntimeError('ctx.average_latest needs clock.enabled=true and an algorithm with inbox = "latest"')
        self.transport.average_latest(nodes, w)

    def merge_parts(self, nodes: np.ndarray, own=None) -> np.ndarray:
        """Service: the ``nodes`` average each parameter with the values of it received since their
        last merge (``own``: their own weights); returns the largest weight received."""
        if self.seconds is None:
            raise RuntimeError("ctx.merge_parts needs clock.enabled=true")
        return self.transport.merge_parts(nodes, own)

    def settle_pairs(self, t: int) -> np.ndarray:
        """In virtual seconds, a window where no node trains: the pairs that complete in it (their
        averages and gradients); returns the nodes no longer finite."""
        if self.seconds is None or not self.transport.pairs_in_flight:
            return np.zeros(0, dtype=np.int64)
        cut = self.transport.cut_offline(self)                    # churn: pairs cut at the window's start
        return np.union1d(cut, self.transport.complete(self, (t + 1) * self.seconds.resolution))

    def average_pairs(self, pairs: list[tuple[int, int]], nodes: np.ndarray, grads: Tensor) -> np.ndarray:
        """The pairs' averages now, in order (conflict-free batches, each one W x), then the
        ``nodes``' gradients (one optimiser step each); returns the nodes no longer finite."""
        from vecgossip.network.pairs import average_matrix, pair_batches
        theta = self.state.theta
        for batch in pair_batches(pairs):
            theta.copy_(self.mixed(theta, average_matrix(self.n, batch)))
        return self.apply_sgd(nodes, grads) if nodes.size else nodes[:0]

    def mix(self, x: Tensor, w, t: int | None = None) -> Tensor:
        """W x for this process's rows ``x`` (n', ...) of any node-first tensor, W (N, N) a scipy
        sparse or dense array (e.g. a pairwise average: 1/2 on the pair, 1 on the other nodes'
        diagonal); a new tensor. Under faults, at the tick's training step: each message j -> i
        (W_ij, i != j) arrives if both are online and it is not dropped, else W_ij moves to W_ii
        (faults.faulty_weights), ONE fate per message and tick (faults.Fates): every matrix mixed
        at the tick, in any order, the same object or an equal copy, loses the same messages (one
        message carries them all), counted once. ``t``: the tick (default: the one being
        processed). Sharded, rows are exchanged across ranks. In virtual seconds it is refused
        (:meth:`untimed`): a product moves every model at once, untimed."""
        self.untimed("mix")
        return self.mixed(x, w, t)

    def mixed(self, x: Tensor, w, t: int | None = None) -> Tensor:
        """W x as :meth:`mix` computes it (the engine's own paired averages, timed by their messages)."""
        flat = x.reshape(x.shape[0], -1)
        return self.mixer(self.realized(w, t), flat).reshape(x.shape)

    def untimed(self, service: str) -> None:
        """Virtual seconds: ``ctx.mix`` and ``ctx.gather`` deliver every message at once, so no
        transfer could time them: refused in one line (the timed services send messages)."""
        if self.seconds is not None:
            from vecgossip.core.errors import ConfigError
            raise ConfigError(f"{self.algorithm.name()}: ctx.{service} delivers every message at once, so it "
                             "cannot run in virtual seconds (clock.enabled=true); send timed messages with "
                             "ctx.send_models or ctx.send_parts (docs: Write your own algorithm)")

    def neighbourhoods(self, w, t: int | None = None) -> Neighbourhoods:
        """Service: who each of this process's nodes hears from under W (N, N) at tick ``t`` (the
        tick being processed when None), after faults: the realization :meth:`mix` and
        :meth:`gather` share (:class:`~vecgossip.network.neighbourhoods.Neighbourhoods`)."""
        w_sp = self.realized(w, t)
        if self._nb is None or self._nb[0] is not w_sp:
            self._nb = (w_sp, neighbourhoods(w_sp, self.shard.lo, self.shard.hi, self.device, self.state.theta.dtype))
        return self._nb[1]

    def gather(self, x: Tensor, w, reduce, t: int | None = None) -> Tensor:
        """Service: ``reduce(block)`` over blocks of this process's nodes and the messages of ``x``
        (any node-first tensor, (n', ...)) each receives under W at tick ``t``
        (:class:`~vecgossip.algorithms.Block`), in chunks of at most 64 MB of messages; returns the
        (n', ...) rows ``reduce`` made. The tick's fault realization (:meth:`mix`'s); ``block.slots``:
        each message's slot among the receiver's active links (``a_full``). Refused in virtual
        seconds (:meth:`untimed`)."""
        self.untimed("gather")
        nb = self.neighbourhoods(w, t)
        links = self.wiring.a_full
        width = int(in_degree(links).max()) if links.shape[0] else 0
        static = neighbourhoods(links, self.shard.lo, self.shard.hi, self.device, self.state.theta.dtype, width)
        adv = self.adversary
        if adv is not None:
            adv.look(x)
        try:
            return gather(x, nb, self.realized(w, t), self.shard, reduce, None if adv is None else adv.forge,
                          slots(nb, static), self.schedule.now if t is None else t)
        except ConfigError as err:       # a plug-in's wrong return: one line, with the method
            raise ConfigError(f"method {self.algorithm.name()}: {err}") from None

    def realized(self, w, t: int | None) -> sp.csr_matrix:
        """W as delivered at tick ``t`` (the tick being processed when None): one fate per message
        and tick (faults.Fates), shared by every matrix mixed at the tick, in any order, the same
        object or an equal copy; a matrix's realization is kept for the tick by its content."""
        tick = self.schedule.now if t is None else t
        if self._mixed is None or self._mixed[0] != tick:
            self._mixed = (tick, Fates(self.n), {})
        _, fates, seen = self._mixed
        w_sp, key = matrix_key(w)
        if key in seen:
            return seen[key]
        if w_sp.shape != (self.n, self.n):
            raise ValueError(f"{self.algorithm.name()}: W must be ({self.n}, {self.n}), got {w_sp.shape}")
        if self.faults is not None:
            online = self.schedule.online if self.schedule.online is not None else np.ones(self.n, dtype=bool)
            w_sp, _ = faulty_weights(w_sp, online, self.faults, fates=fates)
        seen[key] = w_sp
        return w_sp

    def server_averaged(self, averaged: np.ndarray) -> bool:
        """Did the relay server (node 0) average among the rows ``averaged`` (all processes agree)?"""
        rows = averaged.cpu().numpy() if isinstance(averaged, Tensor) else np.asarray(averaged)
        return self.shard.any(bool((rows + self.shard.lo == self.server).any()))

    def server_node(self) -> np.ndarray:
        """The relay server's node index, as senders for :meth:`send_models`."""
        return np.array([self.server])

    def update_peers(self, t: int) -> None:
        """Section III-C3's transfer-learning rule (:class:`~.measures.PeerRule`)."""
        self.peer_rule.update(t)

    # -- step 4 -----------------------------------------------------------------------------
    def measure(self, t: int, evaluated: tuple[Tensor, Tensor] | None = None) -> tuple[dict, np.ndarray]:
        """One metrics row and the reported nodes' accuracies (:class:`~.measures.Measures`),
        with the peer rule's links and the fault counters where they apply."""
        row, acc = self.measures.measure(t, evaluated)
        if self.seconds is not None:
            row["seconds"] = t * self.seconds.resolution
            if self.seconds.churn is not None:
                row.update(nodes_online=self.schedule.online_now, messages_aborted=self.transport.aborted)
        if self.tl is not None:
            row["links_active"] = int(self.links.active.sum())
        if self.faults is not None:
            row.update(messages_sent=self.faults.sent, messages_lost=self.faults.lost,
                       nodes_online=self.schedule.online_now)
        if self.privacy is not None:
            row.update(self.privacy.metrics())
        return row, acc

    # -- checkpoints and the run ----------------------------------------------------------------
    def state_dict(self, t: int, hist) -> dict:
        from vecgossip.engines.tick.state import state_dict
        return state_dict(self, t, hist)

    def load_state_dict(self, d: dict):
        from vecgossip.engines.tick.state import load_state_dict
        return load_state_dict(self, d)

    def run(self, progress: bool = True, on_eval=None, checkpointer=None, resume: dict | None = None):
        """Advance to max_ticks (or early stop): the run loop with this engine alone."""
        return self.run_group(Group([self]), progress, on_eval, checkpointer, resume)

    @staticmethod
    def run_group(group, progress: bool = True, on_eval=None, checkpointer=None, resume: dict | None = None):
        """The run loop (:func:`~vecgossip.engines.loop.run_loop`) over ``group`` with the tick clock."""
        from vecgossip.engines.loop import run_loop
        from vecgossip.engines.tick.clock import TickClock
        return run_loop(group, TickClock(group), progress, on_eval, checkpointer, resume)
