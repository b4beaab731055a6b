"""The public algorithm interface: what a built-in method and a user's own algorithm both implement.

An algorithm is a class with

* ``engine``: ``"rounds"`` (synchronous rounds, paper 2's family) or ``"tick"`` (paper 1's
  asynchronous tick clock);
* ``Params``: a dataclass of its hyperparameters, filled from the config node ``algorithm``
  (everything there but ``_target_``; an unknown key or a wrong type stops the run in one line);
* ``state(layout)``: the per-node state it needs besides the parameters and the momentum, as
  ``{name: PerNode(...)}`` (e.g. CHOCO-SGD's ``x_hat``, gradient tracking's ``y``). The engine
  allocates it node-first (N, *shape) in the run's dtype, checkpoints and resumes it, stacks it
  for ``replicas=S``, splits it by rows across torchrun ranks, counts it in the memory estimate,
  and zeroes an isolated node's rows as it does its parameters;
* the hooks of its engine, over node-first tensors, written against the engine's services (the
  ``ctx`` argument: :class:`RoundServices` / :class:`TickServices`), never against its internals.

The engine owns the machinery: chunking, BatchNorm statistics, the lone-node pairing, bf16/fp64,
faults, shards, replicas, checkpoints, metrics. An algorithm cannot tell whether it runs alone, as
a replica or as a shard: ``ctx.state`` holds the rows it is given.
"""
from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from vecgossip.core.state import Layout
from vecgossip.network.mixing import addmm_, gather_sum, padded_csr

Tensor = torch.Tensor
FINITE_SLICES = 16       # Block.finite: the (r, d, P) block tested in 16 slices of P (a bool temporary of 1/64 block)


@dataclass(frozen=True)
class PerNode:
    """One declared per-node state tensor: ``shape`` per node, where ``"P"`` stands for the
    model's flat size (parameters then BatchNorm statistics) and ``"params"`` for its parameters
    only; ``init``: ``"zeros"``, ``"ones"`` (push-sum weights), or ``"theta"`` (a copy of the
    node's initial model, cut to the shape's first dimension)."""

    shape: tuple[int | str, ...] = ("P",)
    init: str = "zeros"

    def size(self, layout) -> tuple[int, ...]:
        """The shape per node, ``"P"`` and ``"params"`` resolved for ``layout``."""
        named = {"P": layout.size, "params": layout.params_size}
        return tuple(named[d] if isinstance(d, str) else int(d) for d in self.shape)


@dataclass(frozen=True)
class PerEdge(PerNode):
    """One declared per-edge state tensor (per link j -> i: error feedback, a link's last message),
    kept with its receiver: ``(N, d_max, *shape)`` where ``d_max`` is the topology's largest
    in-degree; slot k of receiver i belongs to its k-th neighbour in ascending order
    (``ctx.gather``'s ``block.slots`` says which slot each message uses). Checkpointed, stacked for
    replicas and sharded with its receiver as per-node state is; ``init``: ``"zeros"`` or
    ``"ones"``. A topology redrawn every round has no fixed links: refused there."""

    def size(self, layout, d_max: int = 0) -> tuple[int, ...]:
        """The shape per receiver: (d_max, *shape per edge)."""
        return (int(d_max), *super().size(layout))


@dataclass
class Streams:
    """An algorithm's own random streams (``ctx.random``): ``numpy`` (np.random.Generator) and
    ``torch`` (torch.Generator on the run's device), seeded from the run's seed apart from the
    engine's streams (an algorithm's draws change nothing else), the same on every rank (draw for
    all nodes, then use this rank's rows: a sharded run equals one process), checkpointed."""

    numpy: np.random.Generator
    torch: torch.Generator

    @classmethod
    def of(cls, seed: int, device: torch.device | str = "cpu") -> "Streams":
        """The streams of run seed ``seed`` (numpy (seed, 7); torch seeded from (seed, 8))."""
        key = int(np.random.default_rng([seed, 8]).integers(2**62))
        return cls(np.random.default_rng([seed, 7]), torch.Generator(device=device).manual_seed(key))

    def state(self) -> dict:
        """Both generators' states (what a checkpoint keeps)."""
        return {"numpy": self.numpy.bit_generator.state, "torch": self.torch.get_state()}

    def load(self, d: dict) -> None:
        """Put back a :meth:`state`."""
        self.numpy.bit_generator.state = d["numpy"]
        self.torch.set_state(d["torch"].cpu() if self.torch.device.type == "cpu" else d["torch"])


@dataclass(frozen=True)
class NoParams:
    """An algorithm without hyperparameters of its own."""


@dataclass(frozen=True)
class Requires:
    """What an algorithm needs of the run, as data: checked in one place before the run
    (:mod:`vecgossip.config.rules`), with a one-line message naming the option. ``None``: no
    requirement. ``why``: a few words the message adds (what the algorithm is). ``gather``: it calls
    ``ctx.gather``; ``gather_blocks``: how many blocks of messages its ``reduce`` holds at once, its
    temporaries included (the memory estimate counts them; 6 when unsaid)."""

    local_steps: int | None = None        # round engine: exactly this many local iterations per round
    gossip_steps: int | None = None       # round engine: exactly this many gossip steps per round
    topologies: tuple[str, ...] | None = None   # only these topologies
    not_topologies: tuple[str, ...] = ()  # never these
    gather: bool = False                  # calls ctx.gather: memory.estimate counts its blocks
    seconds: bool = False                 # runs only in virtual seconds (clock.enabled=true): an asynchronous server
    gather_blocks: int = 6                # blocks of messages its reduce holds at once, the messages
                                          # included (memory.gather_workspace; measured by benchmarks/gather.py:
                                          # median / trimmed mean 5, ClippedGossip / BALANCE 3; 6 when unsaid)
    why: str = ""


class Algorithm(ABC):
    """Base class of every algorithm (see the module docstring). A subclass that leaves one of
    its engine's abstract hooks unwritten cannot be instantiated (``algorithms.load`` says so
    in one line)."""

    engine: str = "rounds"
    Params: type = NoParams
    requires: Requires = Requires()       # what it needs of the run (checked before it starts)

    def __init__(self, params: Any = None) -> None:
        self.params = params if params is not None else self.Params()

    def state(self, layout) -> dict[str, PerNode]:
        """The per-node state this algorithm needs beyond parameters and momentum."""
        return {}

    def check(self, cfg) -> None:
        """Refuse (ValueError, one line) a configuration this algorithm cannot run with, beyond what
        :attr:`requires` says; ``cfg``: the run's typed config (``cfg.topology.n``,
        ``cfg.engine.gossip_steps``, ``cfg.layout``: the model's layout, e.g. to check the layers
        named)."""

    @classmethod
    def name(cls) -> str:
        """The class's dotted path (what ``algorithm._target_`` names and summary.json records)."""
        return f"{cls.__module__}.{cls.__qualname__}"

    def hyperparameters(self) -> dict:
        """The ``Params`` as a dict (summary.json's ``method_params``)."""
        return dataclasses.asdict(self.params)


class RoundServices(Protocol):
    """What the round engine gives a :class:`RoundAlgorithm` (``ctx``). Rows are this process's
    clients (all of them in one process; a replica's block; a rank's shard)."""

    state: Any            # NodeState: theta (m', P), momentum (m', P), iters (m',), extra {name: (m', ...)}
    layout: Layout        # the model's Layout: each tensor's slice of a row (layout.tensors(), layout.columns())
    model_bytes: int      # bytes of one model as sent (BatchNorm statistics included unless kept home)
    opt: Any              # the local optimiser's settings (optim.*): lr, lr_decay, momentum, weight_decay, ...
    m: int                # clients in the whole run (every rank's)
    n: int                # the same number, by the name the tick engine's context uses too
    gossip_steps: int     # Q = engine.gossip_steps: the gossip steps of a round (what ``gossip`` takes by default)
    node_ids: np.ndarray  # (m',) the global client index of each of this process's rows
    online: np.ndarray    # (m,) who is online this round (all True without faults)
    random: Streams       # the algorithm's own random streams (numpy, torch): the same on every rank

    def rows(self, clients: Tensor) -> Tensor:
        """This process's rows (indices into ``state``) of the sorted global ``clients``."""

    def local_sgd(self, clients: Tensor, lr: float, sam: bool | None = None, step=None) -> Tensor | float:
        """K_i local iterations of every client in ``clients`` on its own minibatches (the
        optimiser of ``optim.*``; ``sam``: force SAM on or off). ``step(theta, momentum, x, y,
        weight, lr, rows)``, if given, replaces the optimiser's update on a chunk of rows (theta,
        momentum (M, P) views, written back by the engine; ``rows`` their indices in ``state``)
        and returns the (M,) losses. Returns the mean minibatch loss as a 0-dim device tensor
        (``float()`` reads it: a host sync, which the engine makes only for a metrics row; nan
        when no client trained)."""

    def loss_and_grad(self, theta: Tensor, x: Tensor, y: Tensor, weight: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """(M,) losses and the (M, P) stacked gradient of the rows ``theta`` (M, P) on their
        minibatches ``x`` (M, B, ...), ``y`` (M, B) (BatchNorm statistics move as in training)."""

    def gossip(self, t: int, clients: Tensor, steps: int | None = None) -> float:
        """``steps`` (default engine.gossip_steps) products theta <- W_t theta of the models over
        the round's graph (faults drop messages; shards exchange rows). Every row is mixed, the
        clients not in ``clients`` too (a partial-participation algorithm keeps or restores their
        rows itself). Returns the bytes each client sent (Q x its messages x one model's bytes)."""

    def mix(self, x: Tensor, t: int, step: int = 0, w=None, bytes=None) -> Tensor:
        """W x for this process's rows of any node-first tensor ``x`` (m', ...), a new tensor. W:
        the topology's W_t, or ``w`` (a scipy sparse or dense (m, m) array the algorithm made).
        Each W_ij != 0 (i != j) is a message j -> i of ``bytes`` (a number, or (m,) one per client;
        0: that client sends nothing; default one row of ``x``, a row of the model's width counting
        as one model as sent): what the clock times (clock.enabled; docs: Time).
        Under faults one fate per message and (t, step): every matrix mixed at that step, in any
        order, the same object or an equal copy, loses the same messages, and every tensor mixed
        with it shares them. Sharded: rows cross ranks."""

    def neighbourhoods(self, t: int, step: int = 0, w=None) -> Any:
        """Who each of this process's clients hears from at that gossip step, after faults (the
        realization every ``mix`` and ``gather`` of the step shares), as data:
        :class:`~vecgossip.network.neighbourhoods.Neighbourhoods` (``index`` (m', d_max) senders,
        ``mask``, ``weight`` W_ij, ``self_weight`` W_ii, ``degree``; ``edges()`` the edge list)."""

    def gather(self, x: Tensor, t: int, reduce, step: int = 0, w=None, bytes=None) -> Tensor:
        """``reduce(block)`` over blocks of this process's clients and the messages of ``x`` (any
        node-first tensor, (m', ...)) each received at that step (:class:`Block`: ``own``,
        ``msgs`` (r, d_max, ...), ``mask``, ``weight``, ``self_weight``, ``senders``, ``slots``),
        in chunks of receivers of at most 64 MB of messages; returns the (m', ...) rows ``reduce``
        made. A lost message is not in its block; an adversary's clients send what its attack
        forges for each receiver; sharded, a rank first gets the rows its clients need.
        ``Block.weighted_sum`` as ``reduce`` is ``mix``, computed as ``mix`` computes it (one
        sparse product over the senders' rows, no (r, d_max, P) block) unless the rule read or
        replaced ``msgs`` first. A rule reads ``own`` (a view of ``x``), never writes it. Each
        message carries ``bytes`` (as :meth:`mix`)."""

    def messages(self, t: int, step: int = 0, w=None) -> float:
        """Messages each client sent (on average) at that gossip step: W's off-diagonal entries
        per client (under faults: those attempted). Bytes = messages x the payload's bytes. A read:
        it sends nothing (the clock times only what ``gossip``, ``mix`` and ``gather`` send)."""

    def server_average(self, clients: Tensor) -> float:
        """FedAvg's server: the sample-size-weighted average of ``clients``' models becomes every
        client's model. Returns the bytes per client (uploads + downloads). In virtual seconds
        the round is timed over the server's links (downloads, local work, uploads) and a client
        that went offline before its upload arrived is left out."""

    global_model: Tensor | None   # the server's model (1, P) (server algorithms; None before it has one)

    def set_global_model(self, model: Tensor) -> None:
        """The server's model becomes ``model`` (1, P): what a server algorithm's metrics measure."""

    def server_sum(self, x: Tensor, clients: Tensor, weights) -> Tensor:
        """sum_i weights_i x_i over the sorted global ``clients`` as the server holds it, (1, ...),
        the same on every rank (sharded: the rows come from their ranks)."""

    def asynchronous_round(self, buffer: int, concurrency: int) -> Any:
        """An asynchronous server in virtual seconds (clock.enabled): ``concurrency`` clients in
        flight, each downloading the server's model, taking its K_i local steps and uploading;
        runs the clock until ``buffer`` uploads have arrived. Returns ``Uploads``: ``train``
        (clients dispatched at the current version: they train from the current model this round),
        ``arrived`` (clients read now, in arrival order), ``versions`` (the round each of them
        trained from), ``bytes`` (per client: downloads and uploads delivered). The schedule is
        decided by times alone: a client trains at most once from one version."""


class RoundAlgorithm(Algorithm):
    """A synchronous round-based algorithm (paper 2's engine). Round t: the engine draws the
    participants, calls :meth:`local_train`, applies the divergence guard, calls
    :meth:`communicate`, and measures."""

    engine = "rounds"
    server = False      # True: a central server averages (no graph is built; FedAvg's metrics)
    sam: bool | None = None   # True: SAM local steps whatever optim.sam says (DFedSAM); None: optim.sam
    gossips_linearly = False  # True: communicate is x <- W^Q y (Muffliato's pairwise network DP bound applies)
    # the W it mixes with: doubly_stochastic (Metropolis-Hastings on undirected graphs; a directed
    # topology only if balanced) | row_stochastic (a receiver averages what arrives; a lost message
    # is left out) | column_stochastic (push-sum: a sender splits its mass; a lost message's mass
    # stays with the sender)
    mixing = "doubly_stochastic"

    def participants(self, ctx: RoundServices, t: int) -> Tensor | None:
        """Who trains in round t (sorted global client indices), or None: the engine's draw
        (engine.participation). Isolated and offline clients are left out either way."""
        return None

    def local_train(self, ctx: RoundServices, clients: Tensor, lr: float) -> Tensor | float:
        """The participants' local work of one round; returns their mean minibatch loss (a float
        or a 0-dim tensor: the engine reads it only for a metrics row).
        Default: K_i local steps of the configured optimiser (SAM when ``sam``), which replicas
        batch across replicas; an override runs replica by replica."""
        return ctx.local_sgd(clients, lr, sam=self.sam)

    @abstractmethod
    def communicate(self, ctx: RoundServices, t: int, clients: Tensor) -> float:
        """The round's communication; returns the bytes sent per client."""


class TickServices(Protocol):
    """What the tick engine gives a :class:`TickAlgorithm` (``ctx``). Rows are this process's
    nodes (all of them in one process; a replica's block; a rank's shard); node indices are global."""

    state: Any
    layout: Layout        # the model's Layout (layout.tensors(), layout.columns())
    n: int                # nodes in the whole run
    node_ids: np.ndarray  # (n',) the global node index of each of this process's rows
    a_full: Any           # (N, N) scipy receiver-by-sender 0/1 matrix of the active links
    random: Streams       # the algorithm's own random streams (numpy, torch): the same on every rank

    def rows(self, nodes: np.ndarray) -> np.ndarray:
        """This process's rows (indices into ``state``) of the sorted global ``nodes``."""

    def sgd_step(self, nodes: np.ndarray) -> np.ndarray:
        """One step of the configured optimiser (Caffe SGD) for every node in ``nodes`` on a
        fresh minibatch; returns the nodes whose parameters are no longer finite."""

    def gradients(self, nodes: np.ndarray) -> Tensor:
        """(M', P) stacked gradient of this process's rows of ``nodes`` at their current models,
        each on a fresh minibatch drawn as for training (BatchNorm statistics move)."""

    def apply_sgd(self, nodes: np.ndarray, grads: Tensor) -> np.ndarray:
        """The configured optimiser's update of this process's rows of ``nodes`` with ``grads``
        (M', P); their step counts advance. Returns the nodes no longer finite."""

    def pairwise_averages(self, nodes: np.ndarray, pairs: list[tuple[int, int]], grads: Tensor) -> np.ndarray:
        """Paired averages (e.g. AD-PSGD's atomic exchanges, Lian et al. 2018): for each (i, j) of
        ``pairs`` in order, x_i, x_j <- (x_i + x_j) / 2; then each of ``nodes`` applies its
        gradient (``grads`` (M', P), :meth:`gradients`) with the configured optimiser. Untimed: all
        at once (pairs in order, then every gradient). In virtual seconds (clock.*): a request and
        its reply, one message each way; the average and then i's gradient apply when both have
        arrived, in the order pairs complete. Returns the nodes no longer finite."""

    def send_parts(self, senders: np.ndarray, part_of: Tensor, recipients: np.ndarray,
                   online: np.ndarray | None, t: int, replace_waiting: bool = False,
                   weights: np.ndarray | None = None) -> None:
        """Timed messages whose payload is a subset of a model (virtual seconds only,
        clock.enabled=true): each sender's fresh model cut into F parts by ``part_of`` (M, P) (each
        parameter's part, an integer tensor; None with F = 1: the whole model), part f sent to the
        nodes ``recipients[m, f]`` ((M, F, J) global indices): one message per (part, recipient) of
        the part's bytes, queued in (sender, part, recipient) order (clock.policy=fifo: one at a
        time per uplink; ``replace_waiting``: a sender's older messages still waiting in that queue
        are dropped first, their bytes never sent); every message delivered before the window ends
        is added to its receiver's sums and counts (times the sender's ``weights`` (M,) if given:
        a weighted merge; sharded, this process's rows of ``senders``, gathered from every rank).
        ``part_of`` and ``recipients`` are every sender's (the draws of all nodes, on every rank).
        Call it with empty ``senders`` in a window where nobody trains: arrivals are received then
        too. :meth:`merge_parts` merges what arrived."""

    def arrivals(self, nodes: np.ndarray) -> dict:
        """What has arrived (virtual seconds only; the algorithm sets ``arrivals = True``): the
        messages delivered to ``nodes`` (global, e.g. a step's due nodes) since their last call, in
        delivery order, as host arrays ``receiver``, ``sender``, ``sent`` and ``arrived`` (seconds:
        staleness is ``arrived - sent``); read, they leave the log (checkpointed). Messages of
        ``send_models`` and ``send_parts``; paired messages complete as pairs instead."""

    def average_latest(self, nodes: np.ndarray, w) -> None:
        """A wait-free average over the latest model received per link (virtual seconds only; the
        algorithm sets ``inbox = "latest"``, so that ``send_models`` delivers into a per-link
        inbox that keeps each in-neighbour's latest-sent model): each of ``nodes`` becomes
        W_ii x_i + sum_j W_ij c_ij over its in-neighbours j, c_ij the latest-sent model of j it
        has received (none yet: x_i itself); W (N, N) scipy, receiver by sender."""

    def merge_parts(self, nodes: np.ndarray, own=None) -> np.ndarray:
        """The merge of what :meth:`send_parts` delivered: each of ``nodes`` averages every
        parameter with the values of it received since its last merge, x <- (x + sum) / (1 +
        count), and empties them; with ``own`` (M,) the nodes' own weights, x <- (own x + sum) /
        (own + count) (a node with nothing and weight 0 keeps x). Returns the largest sender weight
        each received (M,). Sharded (torchrun): ``own`` and the result cover this process's rows
        of ``nodes`` (``rows(nodes)``), as its declared state does."""

    def mix(self, x: Tensor, w, t: int | None = None) -> Tensor:
        """W x for this process's rows of any node-first tensor ``x``, W (N, N) scipy sparse or
        dense; a new tensor; ``t`` the tick (default: the one being processed). Under faults lost
        messages move W_ij to W_ii, one fate per message and tick, whatever matrix is mixed (an
        equal copy too). Sharded: rows cross ranks."""

    def neighbourhoods(self, w, t: int | None = None) -> Any:
        """Who each of this process's nodes hears from under W at the tick, after faults (the
        realization ``mix`` and ``gather`` share): a
        :class:`~vecgossip.network.neighbourhoods.Neighbourhoods`."""

    def gather(self, x: Tensor, w, reduce, t: int | None = None) -> Tensor:
        """``reduce(block)`` over blocks of this process's nodes and the messages of ``x`` each
        receives under W (N, N) at the tick (:class:`Block`), chunked (at most 64 MB of messages a
        block); returns the (n', ...) rows ``reduce`` made. The tick's fault realization; sharded,
        rows cross ranks."""

    def send_models(self, senders: np.ndarray, online: np.ndarray | None, t: int) -> None:
        """The ``senders``' fresh models into their receivers' buffers along the active links (the
        algorithm's ``compression`` < 1: each element with that probability, section III-C2;
        faults drop messages; shards exchange rows)."""

    def average(self, t: int, online: np.ndarray | None, beta: float, correction: bool) -> np.ndarray:
        """Every node whose buffer is full (R x its degree models; under faults, one held
        faults.timeout ticks) merges it by Eq. 1 with weight ``beta`` on its own model (+
        Algorithm 3's variance correction) and empties it; returns this process's rows that
        averaged (host indices: the engine decides who averages without reading the device)."""

    def server_averaged(self, averaged: np.ndarray) -> bool:
        """Did the relay server (node 0) average among ``averaged`` (all processes agree)?"""

    def server_node(self) -> np.ndarray:
        """The relay server's node index, as senders for :meth:`send_models`."""

    def update_peers(self, t: int) -> None:
        """Section III-C3's transfer-learning rule: each node tests itself on its own label mix
        and adds or drops one peer."""


class TickAlgorithm(Algorithm):
    """An asynchronous algorithm on paper 1's tick clock: a node whose training tick has come
    (every T_acq ticks) runs :meth:`train`, then :meth:`after_train` decides what is sent and
    merged."""

    engine = "tick"
    server = False       # True: node 0 of a star is a non-training relay server (Algorithm 1)
    peer_rule = False    # True: links start inactive and :meth:`peers` runs every engine.tl.period ticks

    # what the engine's services are configured with (buffers, send operator); a subclass may set
    # them from its Params in __init__
    R: int = 1
    compression: float = 1.0
    correction: bool = False
    # engine.cuda_graphs: True when a tick where every node acts is train (the default step), send,
    # merge with static shapes and no read of the device (plain gossip, VC): the engine may capture
    # it as one CUDA graph (engines/tick/graphs.py). An algorithm of its own says so itself.
    capturable: bool = False
    # virtual seconds only, the inbox its messages arrive in: "buffers" (Eq. 1's: send_models,
    # average), "latest" (send_models delivers the latest model of each in-neighbour, per link:
    # average_latest, e.g. SWIFT) or "parts" (send_parts, merge_parts: sums and counts per parameter)
    inbox: str = "buffers"
    # virtual seconds only: a method ``arrival_weight(staleness) -> weights``, each message of
    # ``send_parts`` weighted at its arrival by a function of its staleness (seconds from its send
    # to its arrival, (A,) float64; e.g. FedAsync's (1 + s)^-a), times its sender's weight; None: 1
    arrival_weight = None
    # virtual seconds only: True keeps a log of every message delivered to a node (its sender, send
    # and arrival time) until the algorithm reads it with ctx.arrivals(nodes); paired messages not
    arrivals: bool = False

    def seconds_workspace(self, n: int, p: int, width: int, d_max: int) -> float:
        """Bytes its receive state holds in virtual seconds beyond the engine's (the memory
        estimate, runtime/memory.py): ``n`` nodes, ``p`` parameters of ``width`` bytes, ``d_max``
        the largest in-degree. Default: none (Eq. 1's buffers are counted already)."""
        return 0

    def train(self, ctx: TickServices, t: int, nodes: np.ndarray) -> np.ndarray:
        """Step 1 for the due ``nodes`` (sorted global indices; online, not isolated). Default:
        one step of the configured optimiser each on a fresh minibatch (``ctx.sgd_step``), which
        replicas batch across replicas; an override runs replica by replica. Returns the nodes
        whose parameters are no longer finite."""
        return ctx.sgd_step(nodes)

    @abstractmethod
    def after_train(self, ctx: TickServices, t: int, senders: np.ndarray, online: np.ndarray | None) -> None:
        """What follows a training step of ``senders`` (gossip learning: send, then merge full buffers)."""

    def peers(self, ctx: TickServices, t: int) -> None:
        """The peer rule, every engine.tl.period ticks when ``peer_rule``."""
        ctx.update_peers(t)


class Block:
    """One chunk of receivers and what they received at one step.

    ``receivers`` (r,) global indices; ``rows`` (r,) their rows in this process's state; ``own``
    (r, ...) each receiver's own row of the tensor gathered (a view of it: read, do not write); ``msgs`` (r, d, ...) its messages,
    ``senders`` (r, d) who sent them (global), ``mask`` (r, d) which are real (the rest are padding
    holding the receiver's own row), ``weight`` (r, d) W_ij and ``self_weight`` (r,) W_ii of the
    step's realized W; ``slots`` (r, d): each message's position among the receiver's neighbours in
    the topology (for per-edge state); ``t``: the tick or round.

    The gather builds ``msgs`` when a rule first reads it (``source``: the senders' rows, each
    message's row in them and each receiver's own); :meth:`weighted_sum` of a block whose messages were never read or
    replaced is one sparse product over the senders' rows, ``mix``'s path, with no (r, d, P) copy."""

    def __init__(self, receivers: np.ndarray, rows: Tensor, own: Tensor, msgs: Tensor | None, senders: Tensor,
                 mask: Tensor, weight: Tensor, self_weight: Tensor, slots: Tensor | None = None, t: int = 0,
                 *, source: tuple[Tensor, Tensor, Tensor] | None = None, dest: Tensor | None = None) -> None:
        if msgs is None and source is None:
            raise ValueError("a Block needs its messages or their source")
        self.receivers, self.rows, self.own, self.senders = receivers, rows, own, senders
        self.mask, self.weight, self.self_weight, self.slots, self.t = mask, weight, self_weight, slots, t
        self._msgs, self._source, self._dest = msgs, source, dest     # dest: where the gather puts the result

    @property
    def msgs(self) -> Tensor:
        if self._msgs is None:
            table, where, _ = self._source
            self._msgs = table.index_select(0, where.reshape(-1)).view(*where.shape, *table.shape[1:])
        return self._msgs

    def replace(self, **changes) -> "Block":
        """A copy with some fields changed (e.g. ``msgs``: an adversary's forgeries)."""
        fields = dict(receivers=self.receivers, rows=self.rows, own=self.own, msgs=self._msgs, senders=self.senders,
                      mask=self.mask, weight=self.weight, self_weight=self.self_weight, slots=self.slots, t=self.t)
        fields.update(changes)
        return Block(**fields, source=None if "msgs" in changes else self._source, dest=self._dest)

    def finite(self) -> "Block":
        """This block with every message that holds a NaN or an inf out of ``mask`` (as if lost)
        and zeroed in place: a robust rule calls it first, so that no message, however forged,
        reaches its arithmetic (a non-finite message is the worst message: dropped). The plain
        linear rule (:meth:`weighted_sum`, ``mix``) does not: D-PSGD averages what it gets."""
        msgs = self.msgs
        flat = msgs.reshape(*msgs.shape[:2], -1)
        ok = torch.ones(flat.shape[:2], dtype=torch.bool, device=flat.device)            # (r, d)
        step = -(-flat.shape[2] // FINITE_SLICES)
        for lo in range(0, flat.shape[2], step):       # FINITE_SLICES launches, no block-sized temporary
            ok &= torch.isfinite(flat[:, :, lo:lo + step]).all(2)
        msgs.masked_fill_(~ok.view(*ok.shape, *[1] * (msgs.dim() - 2)), 0.0)
        return self.replace(msgs=msgs, mask=self.mask & ok)

    def weighted_sum(self) -> Tensor:
        """(r, ...) sum_j W_ij x_j + W_ii x_i: what ``mix`` computes (the linear reduction)."""
        w = (self.weight * self.mask).to(self.own.dtype)
        if self._msgs is None:                           # one sparse product over the senders' rows
            table, where, here = self._source
            csr = padded_csr(torch.cat([here.unsqueeze(1), where], 1),
                             torch.cat([self.self_weight.to(w.dtype).unsqueeze(1), w], 1), table.shape[0])
            flat = table.reshape(table.shape[0], -1)
            if self._dest is not None:                   # written where the gather keeps it: no copy
                return addmm_(self._dest.view(len(self.rows), -1), csr, flat, beta=0.0).view_as(self.own)
            return gather_sum(csr, flat).view_as(self.own)
        else:
            near = torch.bmm(w.unsqueeze(1), self.msgs.flatten(2)).view_as(self.own)   # no (r, d, P) temporary
        return near.addcmul_(self.self_weight.to(self.own.dtype).view(-1, *([1] * (self.own.dim() - 1))), self.own)
