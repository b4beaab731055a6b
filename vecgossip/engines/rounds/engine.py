"""The round engine: synchronous decentralized FL (paper 2, Shi et al. ICML 2023, Algorithms 1-2)
and its centralised baselines, for all m clients at once on the stacked (m, P) state.

Round t (t = 0, 1, ...), lr_t = lr_0 * decay^t:
1. the participating clients P_t (all, or a random fraction ``participation``) each run K local
   iterations on minibatches of their OWN fixed shard (K = ``local_steps``, or ``local_epochs`` x
   ceil(n_i / B)), batched across clients:
       SGD:  v <- mu v + (grad F_i(y; xi) + wd y);            y <- y - lr_t v
       SAM:  g = grad F_i(y; xi);  e = rho g / ||g||_2;
             v <- mu v + (grad F_i(y + e; xi) + wd y);        y <- y - lr_t v
2. decentralized: Q gossip steps x <- W_t x (Q = ``gossip_steps``; W_t Metropolis-Hastings on the
   round's graph); centralised (``server``): x_global = sum_{i in P_t} n_i y_i / sum n_i, and every
   client's model becomes x_global (the model it starts from next round);
3. metrics every ``eval_every`` rounds (and before the first, and after the last).

The methods are configurations of this loop (vecgossip/conf/method/*.yaml): D-PSGD (K = 1, SGD, Q = 1),
DFedAvg (K local SGD steps, Q = 1), DFedAvgM (+ momentum 0.9), DFedSAM (SAM local steps),
DFedSAM-MGS (Q = 4), FedAvg and FedSAM (server, participation 0.1). Nothing here knows a model or
a data set by name.

The engine is a composition of parts: local training (:mod:`.local`), the graph's communication
(:class:`~.communication.Communication`) or a :class:`~.server.Server`, the measures
(:class:`~.measures.RoundMeasures`); its checkpoint is :mod:`.state`, its clock (the run loop's
steps) :mod:`.clock`.

Sharded over processes (:mod:`vecgossip.runtime.shard`), ``state`` holds this rank's clients only; the
participants, batch draws, W_t and the bookkeeping are replicated; each gossip step gathers every
client's row (all_gather) and computes this rank's rows of W_t x; the server average gathers the
participants' rows; evaluation gathers the models for x_bar and the consensus distance.
"""
from __future__ import annotations

import numpy as np
import torch

from vecgossip.algorithms.base import Block, RoundAlgorithm, Streams
from vecgossip.core.device import host_copy, upload_indices
from vecgossip.core.errors import ConfigError
from vecgossip.core.faults import FaultConfig, Faults
from vecgossip.core.guard import Diverged, nonfinite_rows
from vecgossip.core.optim import LocalSGDConfig, loss_and_grad
from vecgossip.core.state import NodeState, allocate_declared
from vecgossip.data.dataset import Dataset
from vecgossip.data.partition import ClientSampler
from vecgossip.engines.gather import gather
from vecgossip.engines.group import Group
from vecgossip.engines.rounds.communication import Communication
from vecgossip.engines.rounds.config import RoundOptions
from vecgossip.engines.rounds.local import local_sgd
from vecgossip.engines.rounds.measures import EvalSets, RoundMeasures
from vecgossip.engines.rounds.outbox import Outbox, payload_bytes
from vecgossip.engines.rounds.server import Server, ServerServices
from vecgossip.engines.rounds.timing import StepTimer
from vecgossip.models.execution import Decision
from vecgossip.network.mixing import MixingSchedule
from vecgossip.runtime.shard import Shard

Tensor = torch.Tensor


class RoundEngine(ServerServices):
    """Holds the stacked client state and advances it round by round; all per-client work is
    batched. ``options``: the ``engine`` group (its chunks resolved to ints); ``algorithm``: the
    round's local work and communication (a server algorithm gets no ``mixing``);
    ``average_buffers``: BatchNorm running statistics travel with the model (else each client keeps
    its own); ``eval_images``: at most this many images per evaluation forward (big models)."""

    def __init__(self, options: RoundOptions, algorithm: RoundAlgorithm, state: NodeState,
                 mixing: MixingSchedule | None, forward, opt: LocalSGDConfig, train: Dataset, sampler: ClientSampler,
                 evals: EvalSets, rng: np.random.Generator, faults: Faults | None = None, shard: Shard | None = None,
                 random: Streams | None = None, execution: Decision | None = None, average_buffers: bool = True,
                 eval_images: int | None = None, adversary=None, privacy=None, timer=None) -> None:
        self.cfg, self.algorithm, self.state, self.mixing, self.forward, self.opt = \
            options, algorithm, state, mixing, forward, opt
        self.train_data, self.sampler, self.evals, self.rng = train, sampler, evals, rng
        self.train_chunk, self.eval_chunk = int(options.train_chunk), int(options.eval_chunk)
        self.average_buffers = average_buffers
        self.faults = faults if faults is not None and faults.cfg.active else None
        self.shard = shard if shard is not None else Shard(state.n)       # state: this rank's clients
        if self.faults is None and timer is not None and timer.churn is not None:   # churn: who is online (all
            self.faults = Faults(FaultConfig(), self.shard.n, np.random.default_rng(0))   # clients); never draws
        self.random = random if random is not None else Streams.of(0, state.theta.device)   # the algorithm's
        self.execution = execution if execution is not None else Decision()              # model.exec
        self.layout, self.m, self.device = state.layout, self.shard.n, state.theta.device
        self.node_ids = np.arange(self.shard.lo, self.shard.hi)   # the global index of each row
        self.steps = sampler.steps(options.local_steps, options.local_epochs)          # (m,) K_i (host)
        sent = self.layout.size if average_buffers else self.layout.params_size   # own statistics stay home
        self.model_bytes = sent * state.theta.element_size()
        self.bytes_total = 0.0
        self.diverged = torch.zeros(self.m, dtype=torch.bool, device=self.device)   # isolated clients
        self.diverged_host = np.zeros(self.m, dtype=bool)  # the same on the host: who trains is decided there
        self.online = np.ones(self.m, dtype=bool)          # faults: who is online this round
        self.adversary = adversary                          # Byzantine nodes and their attack, or None
        self.poisoned = (adversary.mask.to(self.device) if adversary is not None and adversary.attack.poisons_data
                         else None)                         # label flipping: whose labels are flipped
        self.privacy = privacy                              # DP-SGD local steps (privacy.*), or None
        self.timer = timer                                  # clock.enabled: the rounds in virtual seconds
        self.t, self.timed = 0, False                       # the round; a service timed it already
        self.build_parts(eval_images)

    def build_parts(self, eval_images: int | None) -> None:
        st, sh = self.state, self.shard
        self.comm = None if self.mixing is None else Communication(
            self.mixing, sh, self.faults, self.algorithm.mixing, self.device, st.theta.dtype)
        if self.comm is not None and self.timer is not None:
            self.comm.outbox = Outbox(self.m)             # the clock times the messages actually sent
            if self.timer.churn is not None:              # a node leaving mid-round: steps timed as sent
                self.comm.step_timer = StepTimer(self.timer, self.m)
        edges = any(type(s).__name__ == "PerEdge" for s in self.algorithm.state(st.layout).values())
        d_max = self.comm.static_links().d_max if edges and self.comm is not None and self.mixing.graphs is None else 0
        allocate_declared(st, self.algorithm, d_max)
        self.server = Server(self.sampler.sizes.to(torch.float32), sh, self.faults, self.model_bytes)
        self.measures = RoundMeasures(st, sh, self.forward, self.evals, self.eval_chunk, eval_images,
                                      self.algorithm.server)

    @property
    def n(self) -> int:
        """Service: clients in the whole run (every rank's); ``m`` is the same number (the round
        engine's name for it), ``n`` the name both engines' contexts share."""
        return self.m

    @property
    def gossip_steps(self) -> int:
        """Service: Q = engine.gossip_steps."""
        return int(self.cfg.gossip_steps)

    @property
    def gaps(self) -> list[float]:
        """The spectral gaps of the first rounds' W (static graphs: once)."""
        return [] if self.comm is None else self.comm.gaps

    @property
    def global_model(self) -> Tensor | None:
        """The server's model (server algorithms; None otherwise or before the first average)."""
        return self.server.model

    # -- who trains ---------------------------------------------------------------------------
    def set_online(self, t: int) -> None:
        """Faults and the clock's churn (at the round's start): who is online in round t."""
        self.t, self.timed = t, False
        if self.faults is not None:
            self.online = self.faults.online(t)
            if self.timer is not None and self.timer.churn is not None:
                self.online = self.online & self.timer.online()
            if self.comm is not None:
                self.comm.online = self.online

    def participants(self) -> Tensor:
        """(M,) sorted client indices training this round: the algorithm's choice
        (:meth:`~vecgossip.algorithms.RoundAlgorithm.participants`), else all, or round(participation
        m) drawn without replacement; isolated and offline clients left out. Chosen on the host and
        uploaded with their host copy (:func:`~vecgossip.core.device.upload_indices`)."""
        chosen = self.algorithm.participants(self, self.t)
        if chosen is not None:
            out = host_copy(chosen)
        elif self.cfg.participation >= 1.0:
            out = np.arange(self.m)
        else:
            k = max(1, int(round(self.cfg.participation * self.m)))
            out = np.sort(self.rng.choice(self.m, k, replace=False))
        keep = ~self.diverged_host[out]                      # isolated clients never train again
        if self.faults is not None:
            keep &= self.online[out]                         # offline clients neither
        return upload_indices(out[keep], self.device)

    def local(self, clients: Tensor) -> tuple[Tensor, slice, np.ndarray]:
        """This rank's clients among the sorted ``clients``: (their rows here, their positions in
        ``clients``, ``clients`` as numpy: its host copy when it carries one, else read back)."""
        c = host_copy(clients)
        blk = self.shard.block(c)
        if not self.shard.sharded:
            return clients, blk, c
        return upload_indices(c[blk] - self.shard.lo, self.device), blk, c

    def check(self, t: int, clients: Tensor) -> Tensor:
        """The divergence guard after local training: stop, or isolate the clients whose parameters
        are no longer finite (they leave the mixing graph / the server average). Returns the
        clients still participating. One host read (a flag) when all is finite."""
        rows, _, c = self.local(clients)
        bad_np = self.shard.union(host_copy(rows)[nonfinite_rows(self.state.theta, rows)] + self.shard.lo)
        if bad_np.size == 0:
            return clients
        if self.cfg.on_divergence == "stop":
            raise Diverged(t, bad_np, "round")
        self.isolate(upload_indices(bad_np, self.device))
        return upload_indices(c[~self.diverged_host[c]], self.device)

    def isolate(self, bad: Tensor) -> None:
        """on_divergence=isolate: the clients' rows are zeroed (a dense W @ X would spread NaN through
        the 0 weights: 0 x NaN = NaN) and they leave every later W."""
        self.diverged[bad] = True
        self.diverged_host[host_copy(bad)] = True
        here, _, _ = self.local(bad)
        self.state.theta[here] = 0
        self.state.momentum[here] = 0
        for v in self.state.extra.values():       # an algorithm's declared state: as the parameters
            v[here] = 0
        if self.mixing is not None:
            self.mixing.remove(host_copy(bad))

    # -- step 1: the algorithm's local work, and the services it uses ----------------------------
    def local_train(self, clients: Tensor, lr: float) -> Tensor | float:
        """The algorithm's local work of the round (:meth:`RoundAlgorithm.local_train`)."""
        return self.algorithm.local_train(self, clients, lr)

    def rows(self, clients: Tensor) -> Tensor:
        """Service: this process's rows of the sorted global ``clients``."""
        return self.local(clients)[0]

    def loss_and_grad(self, theta: Tensor, x: Tensor, y: Tensor, weight: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Service: (M,) losses and the (M, P) gradient (zero on BatchNorm statistics)."""
        loss, grads = loss_and_grad(self.forward, self.layout, theta, x, y, factored=False, weight=weight)
        flat = theta.new_zeros(theta.shape)
        for s, g in zip(self.layout.specs, grads):
            flat[:, s.start:s.stop] = g.reshape(g.shape[0], -1)
        return loss, flat

    def local_opt(self, sam: bool | None = None) -> LocalSGDConfig:
        """The local optimiser, with SAM forced on or off by ``sam`` (None: optim.sam)."""
        return self.opt if sam is None or sam == self.opt.sam else self.opt.model_copy(update={"sam": sam})

    def local_sgd(self, clients: Tensor, lr: float, sam: bool | None = None, step=None) -> Tensor | float:
        """Service: K_i local iterations for every client in ``clients`` (:func:`~.local.local_sgd`);
        returns the mean minibatch loss. ``sam``: force SAM local steps on (DFedSAM) or off;
        ``step``: an algorithm's own update of a chunk (:func:`~.local.local_iteration`)."""
        return local_sgd(self.state, [(self, 0, clients, lr)], sam, step)[0]

    # -- step 2: the algorithm's communication, and the services it uses --------------------------
    def communicate(self, t: int, clients: Tensor) -> float:
        """The algorithm's communication (gossip, a server average, ...); returns the bytes per client.
        ``average_buffers=false``: every client keeps its own BatchNorm running statistics (the
        parameters alone are mixed; the server's model, x_bar's, holds their average)."""
        if self.comm is not None and self.comm.step_timer is not None:
            self.comm.step_timer.begin(self.round_steps(clients))
        if self.average_buffers or not self.layout.buffers:
            return self.algorithm.communicate(self, t, clients)
        p = self.layout.params_size
        own = self.state.theta[:, p:].clone()
        sent = self.algorithm.communicate(self, t, clients)
        self.state.theta[:, p:] = own
        return sent

    def keep_block(self, block: Tensor) -> None:
        """Replicas: gossip ping-pongs theta with the scratch buffer; put the result back into this
        engine's ``block`` of the stacked state (the scratch keeps the other buffer)."""
        if self.state.theta.data_ptr() != block.data_ptr():
            out = self.state.theta
            block.copy_(out)
            self.state.theta, self.comm.scratch = block, out

    def graph(self) -> Communication:
        if self.comm is None:
            raise RuntimeError(f"{self.algorithm.name()} is a server algorithm (server = True): there is no graph")
        return self.comm

    def gossip(self, t: int, clients: Tensor, steps: int | None = None) -> float:
        """Service: ``steps`` (default engine.gossip_steps, Q) products theta <- W_t theta of the
        models (paper 2's gossip; :meth:`mix` for any other tensor), every row (participants or
        not); each step's messages are one model each. Returns the bytes each client sent: Q x its
        messages x one model's bytes (BatchNorm statistics included unless kept home)."""
        q = self.cfg.gossip_steps if steps is None else int(steps)
        if self.adversary is not None:      # Byzantine senders forge per receiver: the gather path
            for step in range(q):
                self.state.theta = self.gather(self.state.theta, t, Block.weighted_sum, step, bytes=self.model_bytes)
            degree, attempted = self.graph().mixing.at(t)[1], sum(self.graph().realized(t, s)[2] for s in range(q))
        else:
            size = self.payload(self.state.theta, self.model_bytes)
            self.state.theta, degree, attempted = self.graph().gossip(self.state.theta, t, q, size)
        if self.faults is None:
            return q * degree * self.model_bytes
        return attempted * self.model_bytes / self.m

    def payload(self, x: Tensor, size=None) -> np.ndarray | None:
        """Under the clock, the bytes each client's message of ``x`` carries, (m,): ``size`` as the
        algorithm declared it (a number, or one per client; 0: that client sends nothing), else
        one row of ``x`` as sent (a row of the model's width: one model, :attr:`model_bytes`).
        None without the clock (nothing is timed)."""
        if self.comm is None or self.comm.outbox is None:
            if size is not None:
                payload_bytes(size, self.m)      # checked the same way with the clock off
            return None
        if size is None:
            row = x.shape[1] == self.layout.size if x.dim() == 2 else False
            size = self.model_bytes if row else int(np.prod(x.shape[1:])) * x.element_size()
        return payload_bytes(size, self.m)

    def mix(self, x: Tensor, t: int, step: int = 0, w=None, bytes=None) -> Tensor:
        """Service: W x for this process's rows ``x`` (m', ...) of any node-first tensor (the
        models, an algorithm's declared state), a new tensor of x's shape. W: the round's W_t of
        the topology, or ``w`` (faults and message losses shared by every tensor mixed at the same
        (t, step, w): :meth:`~.communication.Communication.realized`); sharded, rows are exchanged
        across ranks. Each sender's message carries ``bytes`` (a number, or (m,) one per client;
        default: one row of ``x``, a model's width counting as one model): what the clock times
        (:mod:`~.outbox`)."""
        try:
            if self.adversary is not None:     # Byzantine senders forge per receiver: the gather path
                return self.gather(x, t, Block.weighted_sum, step, w, bytes=bytes)
            size = self.payload(x, bytes)
            if size is not None:                 # sent first: under churn its timing decides what arrives
                self.comm.post(t, step, w, size, self.algorithm.name())
            return self.graph().mix(x, t, step, w)
        except ValueError as err:
            raise ValueError(f"{self.algorithm.name()}: {err}") from None

    def neighbourhoods(self, t: int, step: int = 0, w=None):
        """Service: who each of this process's clients hears from at gossip step ``step`` of round t
        (:class:`~vecgossip.network.neighbourhoods.Neighbourhoods`: padded sender index, mask,
        W_ij, W_ii, degree; ``edges()`` the edge list), after faults: the realization every mix and
        gather of that step shares."""
        return self.graph().neighbourhoods(t, step, w)[0]

    def gather(self, x: Tensor, t: int, reduce, step: int = 0, w=None, bytes=None) -> Tensor:
        """Service: ``reduce(block)`` over blocks of this process's clients and the messages of
        ``x`` (any node-first tensor, (m', ...)) each received at that step
        (:class:`~vecgossip.algorithms.Block`: ``own`` (r, ...), ``msgs`` (r, d, ...), ``mask``,
        ``weight``, ``self_weight``, ``senders``, ``slots``), chunked so that a block holds at most
        64 MB of messages; returns the (m', ...) rows ``reduce`` made. Faults: the step's realization
        (a lost message is not in the block); an adversary's nodes send what its attack forges, per
        receiver; sharded, the rows a rank's clients need come from the other ranks. Each
        sender's message carries ``bytes`` (as :meth:`mix`)."""
        comm = self.graph()
        try:
            size = self.payload(x, bytes)
        except ValueError as err:
            raise ValueError(f"{self.algorithm.name()}: {err}") from None
        if size is not None:
            comm.post(t, step, w, size, self.algorithm.name())
        nb, w_sp = comm.neighbourhoods(t, step, w)
        slots = None if self.mixing.graphs is not None else comm.slots(nb)
        if self.adversary is not None and self.adversary.attack.global_view:   # every client's rows, read only
            sh = self.shard
            self.adversary.look(x if not sh.sharded else sh.gather_rows(x, sh.sizes))
        try:
            return gather(x, nb, w_sp, self.shard, reduce, None if self.adversary is None else self.adversary.forge,
                          slots, t)
        except ConfigError as err:       # a plug-in's wrong return: one line, with the method
            raise ConfigError(f"method {self.algorithm.name()}: {err}") from None

    def messages(self, t: int, step: int = 0, w=None) -> float:
        """Service: the messages each client sent (on average) at gossip step ``step`` of round t
        (W's off-diagonal entries per client; under faults, those attempted): what an algorithm
        multiplies by its payload's bytes to return from ``communicate``."""
        return self.graph().realized(t, step, w)[2] / self.m

    # -- step 3 -------------------------------------------------------------------------------
    def measure(self, t: int, train_loss: float, sent: float, lr: float = float("nan")) -> tuple[dict, np.ndarray]:
        """One metrics row (:class:`~.measures.RoundMeasures`) with the byte and fault counters."""
        failed = self.diverged if self.adversary is None else self.diverged & ~self.adversary.mask.to(self.device)
        row, acc = self.measures.measure(t, lr, float(train_loss), self.left_out(), self.server.model, failed)
        row.update(bytes_per_client=sent, bytes_cumulative=self.bytes_total,
                   clients_diverged=int(self.diverged.sum()))
        if self.privacy is not None:
            row.update(self.privacy.metrics())
        if self.adversary is not None:
            row["byzantine_clients"] = int(self.adversary.byzantine.sum())
        if self.faults is not None:
            row.update(messages_sent=self.faults.sent, messages_lost=self.faults.lost,
                       clients_online=int(self.online.sum()))
        if self.timer is not None:
            row.update(self.timer.row(t))
        return row, acc

    def time_round(self, t: int, clients: Tensor) -> None:
        """Round t in virtual seconds (clock.enabled, :mod:`vecgossip.engines.clock.rounds`): the
        participants' K_i local steps, then each gossip step that sent something as one phase of
        exactly the messages sent at it (:mod:`~.outbox`: each its sender's payload; nothing an
        algorithm only read). A round that sent nothing is its compute alone."""
        steps = self.round_steps(clients)
        if self.comm is not None and self.comm.step_timer is not None:      # churn: timed as sent
            self.comm.outbox.take()
            self.comm.step_timer.finish()
            if not self.online.any():
                self.timer.wait_for_someone()
            return
        if self.comm is None:                    # a server algorithm: its service timed the round
            if not self.timed:
                self.timer.phase(steps, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))
            self.timer.end_round()
            return
        phases = self.comm.outbox.take() or [(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))]
        for k, (sender, receiver, size) in enumerate(phases):
            self.timer.phase(steps if k == 0 else np.zeros(self.m), sender, receiver, size)
        self.timer.end_round()
        if not self.online.any():              # churn: nobody was online; time goes on to the next return
            self.timer.wait_for_someone()

    def round_steps(self, clients: Tensor) -> np.ndarray:
        """(m,) local steps each client took this round: K_i for the participants, else 0."""
        steps = np.zeros(self.m)
        who = host_copy(clients)                 # the participants' host copy: no device read
        steps[who] = self.steps[who]
        return steps

    def left_out(self) -> Tensor:
        """(m,) clients no metric counts: isolated ones, and an adversary's Byzantine clients (the
        metrics are the honest clients': accuracy, x_bar, consensus)."""
        if self.adversary is None:
            return self.diverged
        return self.diverged | self.adversary.mask.to(self.device)

    # -- checkpoints and the run ----------------------------------------------------------------
    def state_dict(self, t: int, hist) -> dict:
        from vecgossip.engines.rounds.state import state_dict
        return state_dict(self, t, hist)

    def load_state_dict(self, d: dict):
        from vecgossip.engines.rounds.state import load_state_dict
        return load_state_dict(self, d)

    def run(self, progress: bool = True, on_eval=None, checkpointer=None, resume: dict | None = None):
        """Rounds to ``cfg.rounds``: the run loop with this engine alone."""
        return self.run_group(Group([self]), progress, on_eval, checkpointer, resume)

    @staticmethod
    def run_group(group, progress: bool = True, on_eval=None, checkpointer=None, resume: dict | None = None):
        """The run loop (:func:`~vecgossip.engines.loop.run_loop`) over ``group`` with the round clock."""
        from vecgossip.engines.loop import run_loop
        from vecgossip.engines.rounds.clock import RoundClock
        return run_loop(group, RoundClock(group), progress, on_eval, checkpointer, resume)
