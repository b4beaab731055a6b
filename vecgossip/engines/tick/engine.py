"""The tick engine: asynchronous gossip learning with model buffers (paper section III-A,
Algorithm 2; REFERENCE.md "Time model"). Every tick, in this order:

1. every node whose training tick has come trains ONE SGD step on a fresh batch, then schedules
   its next training tick += T_acq (fixed, or uniform in [lo, hi] per draw); all train at tick 0;
2. each freshly trained model is sent along the node's links into the receivers' buffers (one
   sparse multiply; or, with weight compression, a chunked per-link masked gather);
3. every node whose buffer holds >= buffer_size models averages with Eq. 1 (+ Algorithm 3 when
   correction is on) and empties its buffer; a relay server (federated learning, Algorithm 1)
   sends its fresh average straight back, and its clients average again;
4. metrics every ``eval_every`` ticks; in the transfer-learning variant, every ``tl.period`` ticks
   each node tests itself on its own label mix and adds or drops one peer (section III-C3).

Steps 1 and 3 and the clock are here; step 2 is :mod:`.tick_transport`, step 4 :mod:`.tick_measures`,
the checkpoint :mod:`.tick_state` (parts of :class:`TickEngine`). The same engine runs every system
of the paper; they differ only in configuration. Nothing happens
on ticks without a training node, so those are skipped.

Sharded over processes (:mod:`vecgossip.runtime.shard`), the tensors hold this rank's nodes only
(``state``, ``buffers``: rows ``shard.lo .. shard.hi``) while the schedules, links, label mixes and
random draws cover all N nodes on every rank; with one process the shard is everything and every
collective is a no-op.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch
from tqdm.auto import tqdm

from vecgossip.data.augment import draw_crops
from vecgossip.engines.tick.buffer import Buffers, average_full
from vecgossip.data.dataset import Dataset
from vecgossip.data.sampling import Shards, sample_indices, sample_labels
from vecgossip.core.faults import Faults, faulty_weights
from vecgossip.core.guard import Diverged, nonfinite
from vecgossip.core.metrics import reach_count
from vecgossip.network.mixing import DENSE_ABOVE, RowMixer, SendOperator
from vecgossip.core.optim import SGDConfig, loss_and_grad, sgd_update
from vecgossip.network.peers import Links, TLConfig
from vecgossip.runtime.shard import Shard
from vecgossip.core.state import NodeState, allocate_declared
from vecgossip.engines.group import Group
from vecgossip.engines.tick.measures import TickMeasures, evaluate_group
from vecgossip.engines.tick.state import History, TickCheckpoint
from vecgossip.engines.tick.transport import TickTransport
from vecgossip.models.execution import Decision
from vecgossip.algorithms.base import Streams, TickAlgorithm

Tensor = torch.Tensor
NEVER = np.iinfo(np.int64).max


@dataclass(frozen=True)
class TickConfig:
    t_acq: tuple[int, int] = (10, 10)  # inclusive range; (10, 10) = fixed
    R: int = 1
    beta: float = 0.5
    correction: bool = False
    compression: float = 1.0           # probability that an element is sent (1 = no compression)
    server: int | None = None          # federated learning: this node is a non-training relay server
    tl: TLConfig | None = None         # transfer-learning peer rule, or None
    batch_size: int = 64
    max_ticks: int = 10_000
    eval_every: int = 10
    early_stop: bool = False
    threshold: float = 0.9
    most_frac: float = 0.9
    eval_chunk: int = 256
    train_chunk: int = 256             # nodes per training chunk (bounds activation memory)
    on_divergence: str = "stop"        # stop | isolate (guard.py)
    timeout: int = 30                  # faults: a buffer held this many ticks averages what arrived


def train_rows(state: NodeState, rows: np.ndarray, images: Tensor, crops: Tensor | None, data: Dataset, forward,
               segments: list[tuple[int, SGDConfig]], chunk: int, guard: bool = True) -> np.ndarray:
    """One Caffe SGD step of the ``rows`` of ``state`` on their drawn ``images`` (M, B) (and
    ``crops``), ``chunk`` rows at a time, which bounds the activation workspace (N = 2000 LeNet
    nodes on a 24 GiB CPU). ``segments`` [(rows, SGDConfig), ...] split ``rows`` in order into
    runs that share an optimiser config (replicas with their own lr); a chunk never spans two.
    Returns the positions in ``rows`` whose parameters are no longer finite (the divergence
    guard: one row sum per chunk, taken while the chunk is still in cache; empty unless ``guard``)."""
    every = rows.size == state.n and bool((rows == np.arange(state.n)).all())
    idx = None if every else torch.from_numpy(rows).to(state.theta.device)
    sums, start = [], 0
    for count, sgd in segments:
        for lo in range(start, start + count, chunk):
            hi = min(lo + chunk, start + count)
            if every:            # in place
                theta, mom, iters = state.theta[lo:hi], state.momentum[lo:hi], state.iters[lo:hi]
            else:                # the chunk's rows only: the workspace stays at a chunk's size
                ix = idx[lo:hi]
                theta, mom, iters = state.theta[ix], state.momentum[ix], state.iters[ix]
            x, y = data.train_batch(images[lo:hi], None if crops is None else crops[lo:hi])
            _, grads = loss_and_grad(forward, state.layout, theta, x, y)
            sgd_update(theta, mom, grads, iters, state.layout, sgd)
            if not every:
                state.theta[ix], state.momentum[ix] = theta, mom
            if guard:
                sums.append(theta.sum(1))
        start += count
    if every:
        state.iters += 1
    else:
        state.iters[idx] += 1
    return nonfinite(torch.cat(sums)) if sums else rows[:0]


class TickEngine(TickTransport, TickMeasures, TickCheckpoint):
    """Holds the stacked node state and advances it tick by tick. All per-node work is batched."""

    def __init__(self, cfg: TickConfig, state: NodeState, links: Links, forward, sgd: SGDConfig,
                 train: Dataset, label_probs: Tensor | None, eval_x: Tensor, eval_y: Tensor,
                 generator: torch.Generator, rng: np.random.Generator, test: Dataset | None = None,
                 faults: Faults | None = None, shard: Shard | None = None, shards: Shards | None = None,
                 eval_idx: Tensor | None = None, algorithm=None, random: Streams | None = None,
                 execution=None) -> None:
        """``shards``: nodes sample their own disjoint shards (data.sampler=shards) instead of
        labels from ``label_probs``; ``eval_idx`` (N, S): each node is evaluated on its own test
        images of ``test`` (data.eval_set=local) instead of the shared ``eval_x``/``eval_y``.
        ``algorithm``: a :class:`~vecgossip.algorithms.TickAlgorithm` (required)."""
        self.cfg, self.state, self.links, self.forward, self.sgd = cfg, state, links, forward, sgd
        if algorithm is None:
            raise TypeError("TickEngine(..., algorithm=...) is required (paper 1's gossip learning or FedAvg relay for "
                            "a TickConfig: vecgossip.composition.tick.default_algorithm(cfg))")
        self.algorithm = algorithm
        allocate_declared(state, self.algorithm)
        self.train_data, self.test_data, self.label_probs = train, test, label_probs
        self.eval_x, self.eval_y = eval_x, eval_y
        self.shards, self.eval_idx = shards, eval_idx
        self.gen, self.rng = generator, rng
        self.random = random if random is not None else Streams.of(0, state.theta.device)   # the algorithm's
        self.execution = execution if execution is not None else Decision()              # model.exec
        self.shard = shard if shard is not None else Shard(state.n)     # state: this rank's rows
        n, p = self.shard.n, state.theta.shape[1]                         # n: all nodes
        self.n = n
        self.node_ids = np.arange(self.shard.lo, self.shard.hi)   # the global index of each row
        self.device = state.theta.device
        self.layout = state.layout
        self.buffers = Buffers.empty(state.n, p, len(self.layout.weights), self.device, state.theta.dtype)
        self.next_train = np.zeros(n, dtype=np.int64)                           # all train at tick 0
        if cfg.server is not None:
            self.next_train[cfg.server] = NEVER
        self.report = (np.arange(n) if cfg.server is None else np.array([cfg.server]))
        self.t_first_average: int | None = None
        self.diverged = np.zeros(n, dtype=bool)                                 # isolated nodes
        self.guard = True          # the divergence guard's row sums (benchmarks/reliability.py times it)
        self.faults = faults if faults is not None and faults.cfg.active else None
        self.since = np.zeros(n, dtype=np.int64)      # faults: tick of the oldest model in each buffer
        self.online_now = n
        self.online: np.ndarray | None = None         # faults: who is online at this tick (due())
        self.mixer = RowMixer(self.shard, self.device, state.theta.dtype)   # ctx.mix
        self.rewire()

    def rewire(self) -> None:
        """(Re)build the send operator (this rank's receivers' rows) and per-node buffer sizes from
        the active links; ``a_full`` (N, N) is every link, on every rank."""
        sh = self.shard
        self.a_full = self.links.matrix()
        dense = self.a_full.nnz / max(1, self.n * self.n) > DENSE_ABOVE   # the one-process choice
        self.send = SendOperator(self.a_full[sh.lo:sh.hi] if sh.sharded else self.a_full, self.device, dense,
                                 self.state.theta.dtype)
        size = self.links.buffer_size(self.cfg.R)[sh.lo:sh.hi]
        self.buffer_size = torch.from_numpy(size).to(self.device, torch.float32)

    # -- step 1 -----------------------------------------------------------------------------
    @staticmethod
    def train_due(group, t: int, live: list[int]) -> list[tuple[int, np.ndarray, np.ndarray, np.ndarray | None]]:
        """Step 1 of tick t for the ``live`` engines of ``group`` (engines/group.py): each one's
        due nodes and their draws (:meth:`draw`), then ONE chunked Caffe SGD step over all of
        them (:func:`train_rows`; a chunk spans engines when their optimisers agree), then each
        one's :meth:`reschedule`. Returns [(engine index, its due nodes, those whose parameters
        are no longer finite (every rank agrees), who is online)] for the engines that trained.
        An algorithm with its own :meth:`~vecgossip.algorithms.TickAlgorithm.train` runs it engine
        by engine instead (never bypassed)."""
        algo = group.engines[0].algorithm
        if type(algo).train is not TickAlgorithm.train:
            out = []
            for s in live:
                e = group.engines[s]
                due, online = e.due(t)
                if due is not None and due.size:
                    bad = e.algorithm.train(e, t, due)
                    e.reschedule(due)
                    out.append((s, due, bad, online))
            return out
        jobs = []                      # (engine index, due, online, rows in the stack, images, crops)
        for s in live:
            e = group.engines[s]
            due, online = e.due(t)
            if due is None or due.size == 0:
                continue
            mine, images, crops = e.draw(due)
            jobs.append((s, due, online, mine + s * group.rows, images, crops))
        if not jobs:
            return []
        first = group.engines[jobs[0][0]]
        one = len(jobs) == 1
        rows = jobs[0][3] if one else np.concatenate([j[3] for j in jobs])
        images = jobs[0][4] if one else torch.cat([j[4] for j in jobs])
        crops = jobs[0][5] if one or jobs[0][5] is None else torch.cat([j[5] for j in jobs])
        sgds = [group.engines[j[0]].sgd for j in jobs]
        segments = ([(rows.size, first.sgd)] if all(g == first.sgd for g in sgds)
                    else [(j[3].size, g) for j, g in zip(jobs, sgds)])
        bad = rows[train_rows(group.state, rows, images, crops, first.train_data, first.forward, segments,
                              first.cfg.train_chunk, first.guard)]                   # rows of the stack
        out = []
        for s, due, online, _, _, _ in jobs:
            e = group.engines[s]
            mine = bad[(bad >= s * group.rows) & (bad < (s + 1) * group.rows)] - s * group.rows
            bad_nodes = e.shard.union(mine + e.shard.lo)
            e.reschedule(due)
            out.append((s, due, bad_nodes, online))
        return out

    def draw(self, nodes: np.ndarray) -> tuple[np.ndarray, Tensor, Tensor | None]:
        """The training draws of tick's ``nodes``: batch indices for all M nodes in one call (so
        results do not depend on the chunk size), and crops when the data set augments. Sharded,
        every rank draws for all M nodes; returns this rank's (rows, images (M', B), crops)."""
        sh, probs, data = self.shard, self.label_probs, self.train_data
        if self.shards is not None:                                                 # own shard only
            images = self.shards.sample(torch.from_numpy(nodes).to(self.device), self.cfg.batch_size, self.gen)
        else:
            if probs is not None and nodes.size < self.n:
                probs = probs[torch.from_numpy(nodes).to(self.device)]
            labels = sample_labels(probs, nodes.size, self.cfg.batch_size, self.gen, self.device, data.num_classes)
            images = sample_indices(data.index, labels, self.gen)                   # (M, B)
        crops = draw_crops(images.shape, data.augment, self.gen, self.device) if data.augment else None
        blk = sh.block(nodes)                                  # this rank's nodes among them
        return nodes[blk] - sh.lo, images[blk], None if crops is None else crops[blk]

    def reschedule(self, nodes: np.ndarray) -> None:
        """The trained nodes' next training tick: += T_acq (fixed, or one uniform draw each)."""
        lo, hi = self.cfg.t_acq
        step = lo if lo == hi else self.rng.integers(lo, hi + 1, size=nodes.size)
        self.next_train[nodes] += step

    # -- step 3 -----------------------------------------------------------------------------
    def average(self, t: int, online: np.ndarray | None = None, beta: float | None = None,
                correction: bool | None = None) -> Tensor:
        """Step 3 (Eq. 1, + Algorithm 3): ``beta``/``correction`` default to the config's."""
        beta = self.cfg.beta if beta is None else beta
        correction = self.cfg.correction if correction is None else correction
        ready = None
        if self.faults is not None:   # online nodes with a full buffer, or one held for faults.timeout ticks
            count = self.buffers.count.cpu().numpy()
            ready = torch.from_numpy(online & ((count >= self.buffer_size.cpu().numpy())
                                               | (t - self.since >= self.cfg.timeout))).to(self.device)
        whole, sh = None, self.shard
        if sh.sharded:            # does every node average (the in-place path)? all ranks agree
            buf = self.buffers
            here = int(((buf.count >= self.buffer_size) & (buf.count > 0)).sum())
            everywhere = sh.sum_int(here)
            whole = everywhere == self.n
        nodes = average_full(self.state.theta, self.buffers, self.buffer_size, beta,
                             correction, self.layout, ready=ready, whole=whole)
        if (everywhere if sh.sharded else nodes.numel()) and self.t_first_average is None:
            self.t_first_average = t
        return nodes

    def tick(self, t: int) -> bool:
        """Steps 1-3 of tick t for this engine alone (the run loop does this for its whole group).
        Returns whether any node trained."""
        trained = self.train_due(Group([self]), t, [0])
        for _, due, bad, online in trained:
            self.after_training(t, due, bad, online)
        return bool(trained)

    def due(self, t: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(the nodes that train at tick t, who is online): None when no node's tick has come;
        with faults, offline nodes skip this training slot (their next tick is drawn)."""
        due = np.flatnonzero(self.next_train == t)
        if due.size == 0:
            return None, None
        online = None
        if self.faults is not None:
            online = self.faults.online(t)
            self.online_now = int(online.sum())
            skip = due[~online[due]]
            lo, hi = self.cfg.t_acq
            self.next_train[skip] += lo if lo == hi else self.faults.rng.integers(lo, hi + 1, size=skip.size)
            due = due[online[due]]
        self.online = online
        return due, online

    def after_training(self, t: int, due: np.ndarray, bad: np.ndarray, online: np.ndarray | None) -> None:
        """Steps 2-3 once ``due`` trained: the divergence guard's policy for ``bad`` (raises
        :class:`Diverged` under on_divergence=stop), sends, averages and the relay server."""
        if bad.size:
            if self.cfg.on_divergence == "stop":
                raise Diverged(t, bad)
            self.isolate(bad)
            due = due[~self.diverged[due]]
            if due.size == 0:
                return
        self.algorithm.after_train(self, t, due, online)

    # -- services of the algorithm interface (algorithms.base.TickServices) ---------------------
    def send_models(self, senders: np.ndarray, online: np.ndarray | None, t: int) -> None:
        self.gossip(senders, online, t)

    def rows(self, nodes: np.ndarray) -> np.ndarray:
        """This process's rows (indices into ``state``) of the sorted global ``nodes``."""
        return nodes[self.shard.block(nodes)] - self.shard.lo

    def sgd_step(self, nodes: np.ndarray) -> np.ndarray:
        """One step of the configured optimiser (Caffe SGD) for every node in ``nodes`` on a fresh
        minibatch (:meth:`draw`, :func:`train_rows`); returns the nodes whose parameters are no
        longer finite (every rank agrees)."""
        mine, images, crops = self.draw(nodes)
        bad = train_rows(self.state, mine, images, crops, self.train_data, self.forward, [(mine.size, self.sgd)],
                         self.cfg.train_chunk, self.guard)
        return self.shard.union(mine[bad] + self.shard.lo)

    def gradients(self, nodes: np.ndarray) -> Tensor:
        """(M', P) the stacked gradient of the loss of this process's rows of ``nodes`` at their
        current models, each on a fresh minibatch drawn as for training (BatchNorm statistics move
        as in a training forward; zero in their columns), ``engine.train_chunk`` rows at a time."""
        mine, images, crops = self.draw(nodes)
        idx = torch.from_numpy(mine).to(self.device)
        out = self.state.theta.new_zeros(mine.size, self.state.theta.shape[1])
        for lo in range(0, mine.size, self.cfg.train_chunk):
            hi = min(lo + self.cfg.train_chunk, mine.size)
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
        idx = torch.from_numpy(mine).to(self.device)
        theta, mom, iters = self.state.theta[idx], self.state.momentum[idx], self.state.iters[idx]
        sgd_update(theta, mom, [grads[:, s.start:s.stop].reshape(-1, *s.shape) for s in self.layout.specs],
                   iters, self.layout, self.sgd)
        self.state.theta[idx], self.state.momentum[idx] = theta, mom
        self.state.iters[idx] += 1
        return self.shard.union(mine[nonfinite(theta.sum(1))] + self.shard.lo if self.guard else mine[:0])

    def mix(self, x: Tensor, w) -> Tensor:
        """W x for this process's rows ``x`` (n', ...) of any node-first tensor, W (N, N) a scipy
        sparse or dense array (e.g. a pairwise average: 1/2 on the pair, 1 on the other nodes'
        diagonal); a new tensor. Under faults, at the tick's training step: each message j -> i
        (W_ij, i != j) arrives if both are online and it is not dropped, else W_ij moves to W_ii
        (faults.faulty_weights). Sharded, rows are exchanged across ranks."""
        w_sp = sp.csr_matrix(w, dtype=np.float64)
        if w_sp.shape != (self.n, self.n):
            raise ValueError(f"{self.algorithm.name()}: W must be ({self.n}, {self.n}), got {w_sp.shape}")
        if self.faults is not None:
            online = self.online if self.online is not None else np.ones(self.n, dtype=bool)
            w_sp, _ = faulty_weights(w_sp, online, self.faults)
        flat = x.reshape(x.shape[0], -1)
        return self.mixer(w_sp, flat).reshape(x.shape)

    def server_averaged(self, averaged: Tensor) -> bool:
        return self.shard.any(bool((averaged + self.shard.lo == self.cfg.server).any()))

    def server_node(self) -> np.ndarray:
        return np.array([self.cfg.server])

    def isolate(self, nodes: np.ndarray) -> None:
        """on_divergence=isolate: the nodes stop training and sending; receivers' buffer sizes
        follow their remaining senders (R x current senders), so nobody waits for them."""
        self.diverged[nodes] = True
        self.next_train[nodes] = NEVER
        self.links.active[nodes] = False
        self.rewire()

    # -- the clock (one loop: a plain run, a shard, replicas) -----------------------------------------
    def run(self, progress: bool = True, on_eval=None, checkpointer=None, resume: dict | None = None) -> History:
        """Advance to max_ticks (or early stop): :meth:`run_group` with this engine alone."""
        return self.run_group(Group([self]), progress, on_eval, checkpointer, resume)

    @staticmethod
    def run_group(group, progress: bool = True, on_eval=None, checkpointer=None, resume: dict | None = None):
        """Advance every engine of ``group`` (engines/group.py: one engine, or S replicas over one
        stacked state) to max_ticks or its own early stop. ``on_eval(history)`` is called after
        every evaluation (used to flush partial metrics of long runs); ``checkpointer.step(...)``
        after every step of the clock (it writes when due and says whether to stop); ``resume``
        is a :meth:`Group.state_dict` to continue from. A replica whose nodes diverge under
        on_divergence=stop ends at that tick, its last row measured; the others go on. Returns
        the group's :meth:`~Group.view` (the engine's history, or the replicas' combined one)."""
        cfg, engines = group.cfg, group.engines
        if resume is None:
            t, live = 0, list(range(len(engines)))
            group.start([History() for _ in engines], History)
            for e, h in zip(engines, group.hists):
                h.initial_variance = {f"var_{k}": float(v) for k, v in zip(e.layout.layers, e.layer_variances())}
        else:
            t, live = group.load_state_dict(resume, History)
        hists, view = group.hists, group.view()
        if not group.single and not all(torch.equal(e.eval_x, engines[0].eval_x)
                                        and torch.equal(e.eval_y, engines[0].eval_y) for e in engines):
            raise ValueError("replicas must share the evaluation set")
        period = cfg.tl.period if cfg.tl is not None else None
        start, before = time.perf_counter(), view.wall_seconds
        bar = tqdm(total=cfg.max_ticks, initial=t, unit="tick", disable=not progress or engines[0].shard.rank > 0,
                   dynamic_ncols=True)
        while t < cfg.max_ticks and live:
            for s, due, bad, online in TickEngine.train_due(group, t, live):
                e = engines[s]
                try:
                    e.after_training(t, due, bad, online)
                except Diverged as err:                  # on_divergence=stop: this engine ends within the tick
                    e.diverged[err.nodes] = True         # left out of the last row's statistics
                    group.record(s, e.measure(t))
                    hists[s].diverged = {"tick": t, "nodes": err.nodes.tolist(), "message": str(err)}
                    hists[s].ticks_run = t
                    live.remove(s)
            if period is not None and t % period == 0:
                for s in live:
                    engines[s].algorithm.peers(engines[s], t)
            if live and t % cfg.eval_every == 0:
                evaluated = evaluate_group(group, live)
                for s in list(live):
                    e = engines[s]
                    group.record(s, e.measure(t, evaluated.get(s)))
                    acc = hists[s].acc[-1]
                    if cfg.early_stop and (acc >= cfg.threshold).sum() >= reach_count(e.report.size, cfg.most_frac):
                        hists[s].stopped_early, hists[s].ticks_run = True, t + 1
                        live.remove(s)
                last = hists[s].rows[-1]
                bar.set_postfix(acc=f"{last['acc_mean']:.3f}", reached=f"{last['frac_reached']:.2f}",
                                **({} if group.single else {"replicas": len(live)}))
                if on_eval is not None:
                    on_eval(view)
            if not live:
                bar.update(1)
                t += 1
                break
            # jump to the next tick where something happens (training, peer update or evaluation)
            nxt = [min(int(engines[s].next_train.min()) for s in live),
                   (t // cfg.eval_every + 1) * cfg.eval_every, cfg.max_ticks]
            if period is not None:
                nxt.append((t // period + 1) * period)
            nxt = min(nxt)
            bar.update(nxt - t)
            t = nxt
            if checkpointer is not None and checkpointer.step(t, cfg.max_ticks, view, before + time.perf_counter()
                                                              - start, lambda: group.state_dict(t, live)):
                break
        bar.close()
        for s, (e, h) in enumerate(zip(engines, hists)):
            if s in live:
                h.ticks_run = t
            h.t_first_average = e.t_first_average
        group.finish(before + time.perf_counter() - start, "ticks_run", t)
        return view
