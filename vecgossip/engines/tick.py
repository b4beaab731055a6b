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

The same engine runs every system of the paper; they differ only in configuration. Nothing happens
on ticks without a training node, so those are skipped.

Sharded over processes (:mod:`vecgossip.shard`), the tensors hold this rank's nodes only
(``state``, ``buffers``: rows ``shard.lo .. shard.hi``) while the schedules, links, label mixes and
random draws cover all N nodes on every rank; with one process the shard is everything and every
collective is a no-op.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
import torch
from tqdm.auto import tqdm

from .. import checkpoint
from ..augment import draw_crops
from ..buffer import Buffers, average_full
from ..data import Dataset, Shards, sample_indices, sample_labels, sample_node_batches
from ..faults import Faults, faulty_weights
from ..guard import Diverged, nonfinite
from ..correction import layer_variance
from ..metrics import evaluate, evaluate_indexed, evaluate_per_node, reach_count, weight_difference_rows
from ..mixing import DENSE_ABOVE, RowMixer, SendOperator, link_list, to_torch_csr
from ..optim import SGDConfig, loss_and_grad, sgd_update
from ..peers import Links, TLConfig
from ..shard import Shard
from ..stack import NodeState, allocate_declared
from .group import Group
from ..execution import Decision, adopt
from ..algorithms.base import Streams, TickAlgorithm

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


@dataclass
class History:
    """What a run recorded: one row per evaluation plus the per-node accuracy matrix."""

    rows: list[dict] = field(default_factory=list)
    acc: list[np.ndarray] = field(default_factory=list)   # each (reported nodes,)
    t_first_average: int | None = None
    ticks_run: int = 0
    wall_seconds: float = 0.0
    stopped_early: bool = False
    initial_variance: dict[str, float] = field(default_factory=dict)  # per layer, before tick 0
    interrupted: bool = False      # stopped by a signal: a checkpoint holds the state, no summary
    diverged: dict | None = None   # on_divergence=stop: {"tick": t, "nodes": [...]} where it stopped
    parts: list = field(default_factory=list)   # replicas' combined history: each replica's own


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


def default_algorithm(cfg: TickConfig):
    """The algorithm a bare :class:`TickConfig` describes (engines built without a config file)."""
    from ..algorithms.fedavg_tick import FedAvgTick, Params as FedParams
    from ..algorithms.gossip import GossipLearning, Params
    if cfg.server is not None:
        return FedAvgTick(FedParams(cfg.beta, cfg.correction))
    return GossipLearning(Params(cfg.beta, cfg.R, cfg.correction, cfg.compression, cfg.tl is not None))


class TickEngine:
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
        ``algorithm``: a :class:`~vecgossip.algorithms.TickAlgorithm` (default: the one ``cfg``
        describes, gossip learning or FedAvg's relay server)."""
        self.cfg, self.state, self.links, self.forward, self.sgd = cfg, state, links, forward, sgd
        self.algorithm = algorithm if algorithm is not None else default_algorithm(cfg)
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

    # -- step 2 -----------------------------------------------------------------------------
    def gossip(self, senders: np.ndarray, online: np.ndarray | None = None, t: int = 0) -> None:
        if self.faults is not None:
            self.gossip_faulty(senders, online, t)
            return
        every = senders.size == self.n
        if self.cfg.compression < 1.0:
            self.gossip_compressed(senders, every)
            return
        sent, cols = self.fetch(senders, every)
        a_sub, counts = self.send.select(cols)
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
        if sh.exchange == "all_gather" or (every and self.send.dense):
            return sh.gather_rows(own, sh.counts(senders)), None if every else senders
        sub = self.a_full[:, senders].tocoo()                   # receivers (global) x senders
        need = np.zeros((sh.world, senders.size), dtype=bool)   # need[r, j]: rank r receives from j
        need[sh.owner(sub.row), sub.col] = True
        cols = senders[need[sh.rank]]
        got = sh.exchange_rows(own, [np.flatnonzero(need[r, blk]) for r in range(sh.world)], sh.counts(cols))
        return got, cols

    def gossip_compressed(self, senders: np.ndarray, every: bool) -> None:
        """Step 2 with weight compression. The masks are drawn link by link in the one-process
        order over ALL links (so the answer does not depend on the shards); each rank applies
        those into its own nodes."""
        sh = self.shard
        if not sh.sharded:
            recv, send = self.send.edges(None if every else senders)
            self.buffers.receive_compressed(recv, send, self.state.theta, self.cfg.compression,
                                            self.layout, self.gen, self.rng, self.cfg.correction)
            return
        recv, send = link_list(self.a_full, None if every else senders)
        mine = (recv >= sh.lo) & (recv < sh.hi)
        src, cols = self.fetch(senders, every)
        row = np.zeros_like(send)
        row[mine] = send[mine] if cols is None else np.searchsorted(cols, send[mine])
        dev = self.device
        self.buffers.receive_compressed(torch.from_numpy(np.where(mine, recv - sh.lo, 0)).to(dev),
                                        torch.from_numpy(row).to(dev), self.state.theta, self.cfg.compression,
                                        self.layout, self.gen, self.rng, self.cfg.correction, src=src, mine=mine)

    def gossip_faulty(self, senders: np.ndarray, online: np.ndarray, t: int) -> None:
        """Step 2 with faults: the messages are the links out of ``senders`` in (sender, receiver)
        order; each arrives if its receiver is online and it is not dropped (faults.kept, one draw
        per message in that order); the rest are counted as lost."""
        recv, send = self.send.edges(senders)
        recv, send = recv.cpu().numpy(), send.cpu().numpy()
        order = np.lexsort((recv, send))
        recv, send = recv[order], send[order]
        keep = online[recv] & self.faults.kept(recv.size)
        self.faults.count(recv.size, recv.size - int(keep.sum()))
        recv, send = recv[keep], send[keep]
        was_empty = (self.buffers.count == 0).cpu().numpy()
        dev = self.device
        if self.cfg.compression < 1.0:
            self.buffers.receive_compressed(torch.from_numpy(recv).to(dev), torch.from_numpy(send).to(dev),
                                            self.state.theta, self.cfg.compression, self.layout, self.gen,
                                            self.rng, self.cfg.correction)
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

    # -- step 4 -----------------------------------------------------------------------------
    def measure(self, t: int, evaluated: tuple[Tensor, Tensor] | None = None) -> tuple[dict, np.ndarray]:
        """One metrics row and the reported nodes' accuracies. ``evaluated``: their (accuracy,
        loss) computed already (replicas evaluate all their nodes in one batch)."""
        theta, sh = self.state.theta, self.shard
        if evaluated is not None:
            acc, loss = evaluated
        elif self.eval_idx is not None:            # data.eval_set=local: each node on its own images
            acc, loss = evaluate_indexed(self.forward, self.layout, theta, self.test_data,
                                         self.eval_idx[sh.lo:sh.hi], self.cfg.eval_chunk)
            acc, loss = sh.cat_nodes(acc), sh.cat_nodes(loss)
        elif self.cfg.server is None:
            acc, loss = evaluate(self.forward, self.layout, theta, self.eval_x, self.eval_y, self.cfg.eval_chunk)
            acc, loss = sh.cat_nodes(acc), sh.cat_nodes(loss)
        else:   # federated learning reports the server's model; it is node 0, on rank 0
            acc, loss = (evaluate(self.forward, self.layout, theta[self.report], self.eval_x, self.eval_y,
                                  self.cfg.eval_chunk) if sh.rank == 0 else (None, None))
            acc, loss = sh.broadcast((acc, loss))
        acc_np, loss_np = acc.cpu().numpy(), loss.cpu().numpy()
        gone = self.diverged[self.report]
        if self.diverged.any():          # isolated nodes: NaN in accuracy.npy, left out of every statistic
            acc_np[gone], loss_np[gone] = np.nan, np.nan
        var = self.layer_variances().cpu().numpy()
        wdiff = self.weight_difference().cpu().numpy()
        alive = acc_np[~gone]
        row = {"tick": t, "acc_mean": float(np.mean(alive)) if alive.size else np.nan,
               "acc_min": float(np.min(alive)) if alive.size else np.nan,
               "acc_max": float(np.max(alive)) if alive.size else np.nan,
               "frac_reached": float((acc_np >= self.cfg.threshold).mean()),
               "loss_mean": float(np.mean(loss_np[~gone])) if alive.size else np.nan,
               "nodes_diverged": int(self.diverged.sum())}
        for name, v, d in zip(self.layout.layers, var, wdiff):
            row[f"var_{name}"] = float(v)
            row[f"wdiff_{name}"] = float(d)
        if self.cfg.tl is not None:
            row["links_active"] = int(self.links.active.sum())
        if self.faults is not None:
            row.update(messages_sent=self.faults.sent, messages_lost=self.faults.lost, nodes_online=self.online_now)
        return row, acc_np

    def alive(self) -> np.ndarray:
        return np.flatnonzero(~self.diverged)

    def layer_variances(self) -> Tensor:
        """(L,) per-layer weight variance averaged over the nodes not isolated (Fig. 7): each
        node's variances are computed where it lives, and averaged over all (one (N, L) gather)."""
        per = self.shard.cat_nodes(layer_variance(self.state.theta, self.layout))      # (N, L)
        return (per if not self.diverged.any() else per[torch.from_numpy(self.alive()).to(self.device)]).mean(0)

    def weight_difference(self) -> Tensor:
        """(L,) section III-A's diff over the nodes not isolated, in node order (cyclic): each
        rank sums its nodes' |w_next - w_n| per layer, the first live row of the next rank with
        one closing its last; the (live nodes, L) terms are added in node order."""
        sh, theta, dev = self.shard, self.state.theta, self.device
        live = ~self.diverged
        rows = np.flatnonzero(live[sh.lo:sh.hi])
        counts = sh.counts(np.flatnonzero(live))              # live nodes per rank
        has = counts > 0
        firsts = sh.gather_rows(theta[torch.from_numpy(rows[:1]).to(dev)], has.astype(np.int64), models=False)
        after = [(sh.rank + i) % sh.world for i in range(1, sh.world + 1)]   # the next ranks, cyclic, then me
        nxt = next((q for q in after if has[q]), sh.rank)
        terms = weight_difference_rows(theta, torch.from_numpy(rows).to(dev), firsts[int(has[:nxt].sum())]
                                       .unsqueeze(0) if has.any() else None, self.layout)
        terms = sh.gather_rows(terms, counts, models=False)
        return terms.sum(0) / max(1, terms.shape[0])

    def update_peers(self, t: int) -> None:
        """Transfer-learning rule (III-C3): test on ``samples`` draws of the node's own label mix;
        >= add_at adds one planned peer, <= drop_at drops a random one (at most one change)."""
        tl = self.cfg.tl
        n = self.n
        probs = self.label_probs
        sh = self.shard
        x, y = sample_node_batches(self.test_data, probs, n, tl.samples, self.gen)        # (N, S, ...)
        acc, _ = evaluate_per_node(self.forward, self.layout, self.state.theta, x[sh.lo:sh.hi], y[sh.lo:sh.hi],
                                   self.cfg.eval_chunk)
        acc = sh.cat_nodes(acc).cpu().numpy()
        add = (acc >= tl.add_at) & ~self.diverged                  # isolated nodes never send again
        changed = self.links.add_first(add)
        changed |= self.links.drop_random((acc <= tl.drop_at) & ~add & ~self.diverged, self.rng)  # <= 1 change
        if changed.any():
            self.rewire()

    # -- checkpoints (checkpoint.py) ----------------------------------------------------------
    def state_dict(self, t: int, hist: History) -> dict:
        """Everything that evolves, at the start of tick ``t``: enough to continue bit for bit."""
        st = self.state
        return {"t": t, "theta": st.theta, "momentum": st.momentum, "iters": st.iters, "extra": st.extra,
                "buffers": self._buffer_rows(), "next_train": self.next_train.copy(),
                "active": self.links.active.copy(), "t_first_average": self.t_first_average,
                "diverged": self.diverged.copy(), "since": self.since.copy(), "online_now": self.online_now,
                "faults": None if self.faults is None else self.faults.state(),
                "gen": checkpoint.generator_state(self.gen), "rng": checkpoint.rng_state(self.rng),
                "random": self.random.state(), "execution": self.execution.as_dict(),
                "hist": dataclasses.asdict(hist)}

    def _buffer_rows(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The buffers as (rows, total[rows], count, var_total): only the rows holding models (an
        empty buffer's sum is zero), which keeps a checkpoint at ~2 copies of the (N, P) state."""
        buf = self.buffers
        rows = torch.nonzero(buf.count > 0).flatten()
        return rows, buf.total[rows], buf.count, buf.var_total

    def load_state_dict(self, d: dict) -> tuple[int, History]:
        st, buf = self.state, self.buffers
        for dst, src in ((st.theta, d["theta"]), (st.momentum, d["momentum"]), (st.iters, d["iters"])):
            dst.copy_(src)
        rows, total, buf_count, var_total = d["buffers"]
        buf.clear(torch.arange(st.n, device=self.device))
        buf.total[rows.to(self.device)] = total.to(self.device)
        buf.count.copy_(buf_count)
        buf.var_total.copy_(var_total)
        for k, v in d["extra"].items():     # an algorithm's declared state: into its (maybe stacked) rows
            if k in st.extra:
                st.extra[k].copy_(v)
            else:
                st.extra[k] = v.to(self.device)
        self.next_train[:] = d["next_train"]
        self.links.active[:] = d["active"]
        self.diverged[:] = d["diverged"]
        self.since[:] = d["since"]
        self.online_now = d["online_now"]
        if self.faults is not None:
            self.faults.load(d["faults"])
        self.rewire()
        self.t_first_average = d["t_first_average"]
        checkpoint.set_generator_state(self.gen, d["gen"])
        checkpoint.set_rng_state(self.rng, d["rng"])
        self.random.load(d["random"])
        self.execution = Decision(**d["execution"])
        adopt(self.forward, d["execution"])
        return d["t"], History(**d["hist"])

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


def evaluate_group(group, live: list[int]) -> dict[int, tuple[Tensor, Tensor]]:
    """Replicas: the accuracy and loss of every live replica's reported nodes, in ONE batched
    evaluation over their rows of the stack. One engine: {} (its :meth:`TickEngine.measure`
    evaluates, sharded or on local test sets as configured)."""
    if group.single:
        return {}
    blocks = [group.engines[s].report + s * group.rows for s in live]
    rows = np.concatenate(blocks)
    whole = rows.size == group.state.n and bool((rows == np.arange(group.state.n)).all())
    theta = group.state.theta if whole else group.state.theta[torch.from_numpy(rows).to(group.state.theta.device)]
    first = group.engines[0]
    acc, loss = evaluate(first.forward, first.layout, theta, first.eval_x, first.eval_y, first.cfg.eval_chunk)
    out, lo = {}, 0
    for s, b in zip(live, blocks):
        out[s] = acc[lo:lo + b.size], loss[lo:lo + b.size]
        lo += b.size
    return out
