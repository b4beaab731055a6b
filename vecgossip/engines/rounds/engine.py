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

Sharded over processes (:mod:`vecgossip.runtime.shard`), ``state`` holds this rank's clients only; the
participants, batch draws, W_t and the bookkeeping are replicated; each gossip step gathers every
client's row (all_gather) and computes this rank's rows of W_t x; the server average gathers the
participants' rows; evaluation gathers the models for x_bar and the consensus distance.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
import torch
from tqdm.auto import tqdm

from vecgossip.runtime import checkpoint
from vecgossip.data.dataset import Dataset
from vecgossip.core.faults import Faults, faulty_weights
from vecgossip.core.guard import Diverged, nonfinite_rows
from vecgossip.core.metrics import consensus_distance, evaluate, evaluate_indexed, per_image
from vecgossip.network.mixing import MixingSchedule, RowMixer, mix_, mixing_operator, spectral_gap
from vecgossip.core.optim import LocalSGDConfig, local_step, loss_and_grad
from vecgossip.data.partition import ClientSampler, Minibatch
from vecgossip.algorithms.base import RoundAlgorithm, Streams
from vecgossip.runtime.shard import Shard
from vecgossip.core.state import NodeState, allocate_declared
from vecgossip.engines.group import Group
from vecgossip.models.execution import Decision, restore

Tensor = torch.Tensor
GAP_ROUNDS = 20   # topology=random: the spectral gap reported is the mean over the first 20 rounds' W
# what a lost message's weight becomes, by the kind of W the algorithm mixes with (faults.faulty_weights)
LOSS_RULE = {"doubly_stochastic": "receiver", "row_stochastic": "renormalise", "column_stochastic": "sender"}


@dataclass(frozen=True)
class RoundConfig:
    rounds: int = 100
    local_steps: int | None = None     # K, or None to count in epochs
    local_epochs: int | None = 5
    gossip_steps: int = 1              # Q
    participation: float = 1.0         # fraction of clients that train each round
    server: bool = False               # centralised FL (FedAvg / FedSAM)
    eval_every: int = 10
    train_chunk: int = 256
    eval_chunk: int = 256
    eval_images: int | None = None     # at most this many images per evaluation forward (big models)
    on_divergence: str = "stop"        # stop | isolate (guard.py)
    average_buffers: bool = True       # BatchNorm running statistics: gossiped / averaged with the model


@dataclass
class RoundHistory:
    rows: list[dict] = field(default_factory=list)
    acc: list[np.ndarray] = field(default_factory=list)     # each (m,): local-test accuracy per client
    rounds_run: int = 0
    wall_seconds: float = 0.0
    spectral_gaps: list[float] = field(default_factory=list)
    interrupted: bool = False      # stopped by a signal: a checkpoint holds the state, no summary
    diverged: dict | None = None   # on_divergence=stop: {"round": t, "nodes": [...]} where it stopped
    parts: list = field(default_factory=list)   # replicas' combined history: each replica's own


@dataclass
class EvalSets:
    """Local test sets ``local`` (m, S) and the shared global subset ``shared`` (G,) for the
    per-client global accuracy, as indices into ``test``; x_bar is evaluated on the full test set."""

    test: Dataset
    local: Tensor
    shared: Tensor


def local_iteration(state: NodeState, rows: Tensor, batch, first: int, segments, chunk: int, forward,
                    data: Dataset, step=None) -> Tensor:
    """One local iteration of the clients at ``rows`` of ``state``, in place (:func:`local_step`,
    ``chunk`` clients at a time); their minibatches are rows ``first``.. of ``batch``.
    ``segments`` [(count, lr, LocalSGDConfig), ...] split ``rows`` in order into runs that share an
    lr and optimiser (replicas may differ); a chunk never spans two. When ``rows`` is every row the
    state is updated in place, else the rows are gathered, trained and written back. ``step``: an
    algorithm's own update of a chunk, ``step(theta, momentum, x, y, weight, lr, rows)`` -> (M,)
    losses, in place of :func:`local_step`. Returns the clients' minibatch losses (len(rows),)."""
    every = rows.numel() == state.n
    theta = state.theta if every else state.theta[rows]
    mom = state.momentum if every else state.momentum[rows]
    out, lo = [], 0
    for count, lr, opt in segments:
        for c in range(lo, lo + count, chunk):
            hi = min(c + chunk, lo + count)
            x, y, w = batch.materialise(data, first + c, first + hi)
            if step is None:
                out.append(local_step(forward, state.layout, theta[c:hi], mom[c:hi], x, y, w, lr, opt))
            else:
                out.append(step(theta[c:hi], mom[c:hi], x, y, w, lr, rows[c:hi]))
        lo += count
    if not every:
        state.theta[rows] = theta
        state.momentum[rows] = mom
    state.iters[rows] += 1
    return torch.cat(out) if out else state.theta.new_zeros(0)


class RoundEngine:
    """Holds the stacked client state and advances it round by round; all per-client work is batched."""

    def __init__(self, cfg: RoundConfig, state: NodeState, mixing: MixingSchedule, forward,
                 opt: LocalSGDConfig, train: Dataset, sampler: ClientSampler, evals: EvalSets,
                 rng: np.random.Generator, faults: Faults | None = None, shard: Shard | None = None,
                 algorithm=None, random: Streams | None = None,
                 execution=None) -> None:
        """``algorithm``: a :class:`~vecgossip.algorithms.RoundAlgorithm` (required); its declared per-node state is
        allocated in ``state.extra`` (zeros, or the initial models)."""
        self.cfg, self.state, self.mixing, self.forward, self.opt = cfg, state, mixing, forward, opt
        if algorithm is None:
            raise TypeError("RoundEngine(..., algorithm=...) is required (e.g. vecgossip.algorithms.dfedavg.DFedAvg())")
        self.algorithm = algorithm
        allocate_declared(state, algorithm)
        self.train_data, self.sampler, self.evals, self.rng = train, sampler, evals, rng
        self.random = random if random is not None else Streams.of(0, state.theta.device)   # the algorithm's
        self.execution = execution if execution is not None else Decision()              # model.exec
        self.layout = state.layout
        self.shard = shard if shard is not None else Shard(state.n)       # state: this rank's clients
        self.m = self.shard.n
        self.node_ids = np.arange(self.shard.lo, self.shard.hi)   # the global index of each row
        self._round_w: tuple | None = None    # ((t, step), w given, round_mixing's answer): one realization
        self.device = state.theta.device
        self.mixer = RowMixer(self.shard, self.device, state.theta.dtype)   # sharded W x
        self.steps = sampler.steps(cfg.local_steps, cfg.local_epochs)                   # (m,) K_i
        self.weights = sampler.sizes.to(torch.float32)                                   # (m,) n_i
        self.scratch: Tensor | None = None                                              # gossip buffer
        sent = self.layout.size if cfg.average_buffers else self.layout.params_size   # own statistics stay home
        self.model_bytes = sent * state.theta.element_size()
        self.bytes_total = 0.0
        self.gaps: list[float] = []     # spectral gap of W_t (static graphs: once)
        self.diverged = torch.zeros(self.m, dtype=torch.bool, device=self.device)   # isolated clients
        self.faults = faults if faults is not None and faults.cfg.active else None
        self.online = np.ones(self.m, dtype=bool)          # faults: who is online this round
        self.global_model: Tensor | None = None            # server mode: the server's model

    # -- who trains ---------------------------------------------------------------------------
    def participants(self) -> Tensor:
        """(M,) sorted client indices training this round: all, or round(participation m) drawn
        without replacement."""
        if self.cfg.participation >= 1.0:
            out = torch.arange(self.m, device=self.device)
        else:
            k = max(1, int(round(self.cfg.participation * self.m)))
            out = torch.from_numpy(np.sort(self.rng.choice(self.m, k, replace=False))).to(self.device)
        keep = ~self.diverged[out]                           # isolated clients never train again
        if self.faults is not None:
            keep &= torch.from_numpy(self.online).to(self.device)[out]   # offline clients neither
        return out[keep]

    def local(self, clients: Tensor) -> tuple[Tensor, slice, np.ndarray]:
        """This rank's clients among the sorted ``clients``: (their rows here, their positions in
        ``clients``, ``clients`` as numpy)."""
        c = clients.cpu().numpy()
        blk = self.shard.block(c)
        return torch.from_numpy(c[blk] - self.shard.lo).to(self.device), blk, c

    def check(self, t: int, clients: Tensor) -> Tensor:
        """The divergence guard after local training: stop, or isolate the clients whose parameters
        are no longer finite (they leave the mixing graph / the server average). Returns the
        clients still participating."""
        rows, _, _ = self.local(clients)
        bad_np = self.shard.union(rows.cpu().numpy()[nonfinite_rows(self.state.theta, rows)] + self.shard.lo)
        if bad_np.size == 0:
            return clients
        bad = torch.from_numpy(bad_np).to(self.device)
        if self.cfg.on_divergence == "stop":
            raise Diverged(t, bad.cpu().numpy(), "round")
        self.diverged[bad] = True
        # their rows are zeroed: a dense W @ X would spread NaN through the 0 weights (0 x NaN = NaN)
        here, _, _ = self.local(bad)
        self.state.theta[here] = 0
        self.state.momentum[here] = 0
        for v in self.state.extra.values():       # an algorithm's declared state: as the parameters
            v[here] = 0
        if self.mixing is not None:
            self.mixing.remove(bad.cpu().numpy())
        return clients[~self.diverged[clients]]

    # -- step 1 -------------------------------------------------------------------------------
    def local_train(self, clients: Tensor, lr: float) -> float:
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
        return self.opt if sam is None or sam == self.opt.sam else dataclasses.replace(self.opt, sam=sam)

    def local_sgd(self, clients: Tensor, lr: float, sam: bool | None = None, step=None) -> float:
        """Service: K_i local iterations for every client in ``clients`` (:func:`local_sgd`);
        returns the mean minibatch loss. ``sam``: force SAM local steps on (DFedSAM) or off;
        ``step``: an algorithm's own update of a chunk (:func:`local_iteration`)."""
        return local_sgd(self.state, [(self, 0, clients, lr)], sam, step)[0]

    def keep_block(self, block: Tensor) -> None:
        """Replicas: gossip ping-pongs theta with the scratch buffer; put the result back into this
        engine's ``block`` of the stacked state (the scratch keeps the other buffer)."""
        if self.state.theta.data_ptr() != block.data_ptr():
            out = self.state.theta
            block.copy_(out)
            self.state.theta, self.scratch = block, out

    # -- step 2 -------------------------------------------------------------------------------
    def communicate(self, t: int, clients: Tensor) -> float:
        """The algorithm's communication (gossip, a server average, ...); returns the bytes per client.
        ``average_buffers=false``: every client keeps its own BatchNorm running statistics (the
        parameters alone are mixed; the server's model, x_bar's, holds their average)."""
        if self.cfg.average_buffers or not self.layout.buffers:
            return self.algorithm.communicate(self, t, clients)
        p = self.layout.params_size
        own = self.state.theta[:, p:].clone()
        sent = self.algorithm.communicate(self, t, clients)
        self.state.theta[:, p:] = own
        return sent

    def server_average(self, clients: Tensor) -> float:
        """Service: FedAvg's server average (:meth:`server_round`)."""
        if self.mixing is not None:
            raise RuntimeError(f"{self.algorithm.name()} asked for a server average: set server = True on "
                               "the algorithm class (no graph is built then)")
        return self.server_round(clients)

    def gossip(self, t: int, clients: Tensor, steps: int | None = None) -> float:
        """Service: ``steps`` (default engine.gossip_steps, Q) products theta <- W_t theta of the
        models (paper 2's gossip; :meth:`mix` for any other tensor). Returns the bytes each client
        sent: Q x its messages x one model's bytes (BatchNorm statistics included unless kept home)."""
        if self.mixing is None:
            raise RuntimeError(f"{self.algorithm.name()} is a server algorithm (server = True): there is no graph")
        q = self.cfg.gossip_steps if steps is None else int(steps)
        _, degree, _ = self.mixing.at(t)
        x, attempted = self.state.theta, 0
        for step in range(q):
            op, w_q, k = self.round_mixing(t, step)
            attempted += k
            if self.shard.sharded:
                x = self.mixer(w_q, x)
                continue
            out = self.scratch if self.scratch is not None and self.scratch.shape == x.shape else torch.empty_like(x)
            mix_(out, op, x)
            x, self.scratch = out, x
        self.state.theta = x
        if self.faults is None:
            return q * degree * self.model_bytes
        return attempted * self.model_bytes / self.m

    def round_mixing(self, t: int, step: int = 0, w=None) -> tuple[Tensor | None, sp.csr_matrix, int]:
        """Gossip step ``step`` of round t: (W as this process's operator (None when sharded),
        W as scipy CSR, the messages attempted). W is the topology's W_t, or ``w`` (a scipy
        sparse or dense (m, m) array the algorithm made, e.g. one it draws each round). Under
        faults, ONE realization per (t, step, w) (faults.faulty_weights), shared by every tensor
        mixed at that step (one message carries them all); a lost message's weight follows the
        algorithm's ``mixing``: doubly stochastic, the receiver uses its own model in its place;
        row stochastic, the receiver averages what arrived; column stochastic (push-sum), the
        sender keeps the mass. Without faults the messages are W's off-diagonal entries."""
        if self.mixing is None:
            raise RuntimeError(f"{self.algorithm.name()} is a server algorithm (server = True): there is no graph")
        hit = self._round_w
        if hit is not None and hit[0] == (t, step) and hit[1] is w:
            return hit[2]
        if w is None:
            op, _, w_sp = self.mixing.at(t)
            if step == 0 and t < GAP_ROUNDS and (t == 0 or self.mixing.graphs is not None) and len(self.gaps) <= t:
                self.gaps.append(spectral_gap(w_sp))
        else:
            w_sp = sp.csr_matrix(w, dtype=np.float64)
            if w_sp.shape != (self.m, self.m):
                raise ValueError(f"{self.algorithm.name()}: W must be ({self.m}, {self.m}), got {w_sp.shape}")
            op = None if self.shard.sharded else mixing_operator(w_sp, self.device, self.state.theta.dtype)
        if self.faults is not None:
            w_sp, attempted = faulty_weights(w_sp, self.online, self.faults, LOSS_RULE[self.algorithm.mixing])
            op = mixing_operator(w_sp, self.device, self.state.theta.dtype)
        else:
            attempted = int(w_sp.nnz - np.count_nonzero(w_sp.diagonal()))
        self._round_w = ((t, step), w, (op, w_sp, attempted))
        return op, w_sp, attempted

    def mix(self, x: Tensor, t: int, step: int = 0, w=None) -> Tensor:
        """Service: W x for this process's rows ``x`` (m', ...) of any node-first tensor (the
        models, an algorithm's declared state), a new tensor of x's shape. W: the round's W_t of
        the topology, or ``w`` (see :meth:`round_mixing`: faults and message losses shared by every
        tensor mixed at the same (t, step, w)); sharded, rows are exchanged across ranks."""
        op, w_sp, _ = self.round_mixing(t, step, w)
        flat = x.reshape(x.shape[0], -1)
        if self.shard.sharded:
            return self.mixer(w_sp, flat).reshape(x.shape)
        out = torch.empty_like(flat)
        mix_(out, op, flat)
        return out.reshape(x.shape)

    def messages(self, t: int, step: int = 0, w=None) -> float:
        """Service: the messages each client sent (on average) at gossip step ``step`` of round t
        (W's off-diagonal entries per client; under faults, those attempted): what an algorithm
        multiplies by its payload's bytes to return from ``communicate``."""
        return self.round_mixing(t, step, w)[2] / self.m

    def server_round(self, clients: Tensor) -> float:
        """FedAvg/FedSAM: the server averages the participants' models (weighted by shard size) and
        every client receives the result. Faults: each upload and each download (one draw per
        participant, then one per client, ascending) may be lost; lost uploads are left out (none
        arrived: the server keeps its model), offline clients and lost downloads keep their own."""
        theta, m = self.state.theta, self.m
        got = clients
        if self.faults is not None:
            got = clients[torch.from_numpy(self.faults.kept(clients.numel())).to(self.device)]
        if got.numel():
            w = self.weights[got].to(theta.dtype)
            rows, _, got_np = self.local(got)
            sent = self.shard.gather_rows(theta[rows], self.shard.counts(got_np))           # (M, P)
            self.global_model = ((w @ sent) / w.sum()).unsqueeze(0)                         # (1, P)
        if self.faults is None:
            theta.copy_(self.global_model.expand_as(theta))
            return 2.0 * clients.numel() * self.model_bytes / m          # uploads + downloads
        down = self.online & self.faults.kept(m)
        if self.global_model is not None:
            theta[torch.from_numpy(np.flatnonzero(down)).to(self.device)] = self.global_model
        up_sent, down_sent = clients.numel(), int(self.online.sum())
        self.faults.count(up_sent + down_sent, up_sent - got.numel() + down_sent - int(down.sum()))
        return (up_sent + down_sent) * self.model_bytes / m

    # -- step 3 -------------------------------------------------------------------------------
    def measure(self, t: int, train_loss: float, sent: float, lr: float = float("nan")) -> tuple[dict, np.ndarray]:
        theta, ev, chunk, sh = self.state.theta, self.evals, self.cfg.eval_chunk, self.shard
        alive = ~self.diverged
        every = sh.gather_rows(theta, sh.sizes, models=False)          # all clients' models (sharded: gathered)
        live = every if bool(alive.all()) else every[alive]       # isolated clients: left out of x_bar
        xbar = live.mean(0, keepdim=True) if self.global_model is None else self.global_model   # (1, P)
        full = torch.arange(ev.test.labels.numel(), device=self.device)
        imgs = self.cfg.eval_images
        right, img_loss = per_image(self.forward, self.layout, xbar, ev.test, full,
                                    min(2000, imgs or 2000))                                # (E,) each
        if self.cfg.server:   # every client holds the global model: one pass serves all metrics
            local, local_loss = right[ev.local].float().mean(1), img_loss[ev.local].mean(1)
            shared = right[ev.shared].float().mean().expand(self.m)
        else:
            local, local_loss = evaluate_indexed(self.forward, self.layout, theta, ev.test, ev.local[sh.lo:sh.hi],
                                                 chunk, imgs)
            local, local_loss = sh.cat_nodes(local), sh.cat_nodes(local_loss)
            # the chunk was sized for S local images per client: keep chunk x images the same here
            per = max(1, chunk * ev.local.shape[1] // ev.shared.numel())
            shared, _ = evaluate(self.forward, self.layout, theta, *ev.test.batch(ev.shared), per, imgs)
            shared = sh.cat_nodes(shared)
        acc, ok = local.cpu().numpy(), alive.cpu().numpy()
        acc[~ok] = np.nan                               # isolated clients: NaN in accuracy.npy
        a = acc[ok]
        row = {"round": t, "lr": lr, "acc_mean": float(a.mean()) if a.size else np.nan,
               "acc_min": float(a.min()) if a.size else np.nan, "acc_max": float(a.max()) if a.size else np.nan,
               "global_acc_mean": float(shared[alive].mean()), "xbar_acc": float(right.float().mean()),
               "test_loss_mean": float(local_loss[alive].mean()), "train_loss_mean": train_loss,
               "consensus_distance": consensus_distance(live[:, :self.layout.params_size]), "bytes_per_client": sent,
               "bytes_cumulative": self.bytes_total, "clients_diverged": int((~ok).sum())}
        if self.faults is not None:
            row.update(messages_sent=self.faults.sent, messages_lost=self.faults.lost,
                       clients_online=int(self.online.sum()))
        return row, acc

    # -- checkpoints (checkpoint.py) ----------------------------------------------------------
    def state_dict(self, t: int, hist: RoundHistory) -> dict:
        """Everything that evolves, before round ``t``: enough to continue bit for bit."""
        st, smp = self.state, self.sampler
        return {"t": t, "theta": st.theta, "momentum": st.momentum, "iters": st.iters, "extra": dict(st.extra),
                "sampler": (smp.order, smp.step), "sampler_gen": checkpoint.generator_state(smp.gen),
                "rng": checkpoint.rng_state(self.rng), "random": self.random.state(), "execution": self.execution.as_dict(),
                "bytes_total": self.bytes_total,
                "diverged": self.diverged.clone(), "global_model": self.global_model, "online": self.online.copy(),
                "faults": None if self.faults is None else self.faults.state(),
                "hist": dataclasses.asdict(hist)}

    def load_state_dict(self, d: dict) -> tuple[int, RoundHistory]:
        st, smp = self.state, self.sampler
        for dst, src in ((st.theta, d["theta"]), (st.momentum, d["momentum"]), (st.iters, d["iters"]),
                         (smp.order, d["sampler"][0]), (smp.step, d["sampler"][1]),
                         *((st.extra[k], v) for k, v in d.get("extra", {}).items())):
            checkpoint.copy_in(dst, src)
        checkpoint.set_generator_state(smp.gen, d["sampler_gen"])
        checkpoint.set_rng_state(self.rng, d["rng"])
        self.random.load(d["random"])
        self.execution = restore(self.forward, d.get("execution"))
        self.bytes_total = d["bytes_total"]
        self.diverged.copy_(d["diverged"])
        self.global_model = d["global_model"]
        self.online[:] = d["online"]
        if self.faults is not None:
            self.faults.load(d["faults"])
        if self.mixing is not None and bool(self.diverged.any()):
            self.mixing.remove(torch.nonzero(self.diverged).flatten().cpu().numpy())
        hist = RoundHistory(**d["hist"])
        self.gaps = hist.spectral_gaps
        return d["t"], hist

    # -- the rounds (one loop: a plain run, a shard, replicas) ---------------------------------------
    def run(self, progress: bool = True, on_eval=None, checkpointer=None, resume: dict | None = None) -> RoundHistory:
        """Rounds to ``cfg.rounds``: :meth:`run_group` with this engine alone."""
        return self.run_group(Group([self]), progress, on_eval, checkpointer, resume)

    @staticmethod
    def run_group(group, progress: bool = True, on_eval=None, checkpointer=None, resume: dict | None = None):
        """Every engine of ``group`` (engines/group.py: one engine, or S replicas over one stacked
        state) to ``cfg.rounds``; ``on_eval``, ``checkpointer`` and ``resume`` as in the tick
        engine (checkpoints fall between rounds). A replica that diverges under
        on_divergence=stop ends within that round, its last row measured; the others go on."""
        cfg, engines = group.cfg, group.engines
        if resume is None:
            first, live = 0, list(range(len(engines)))
            group.start([RoundHistory(spectral_gaps=e.gaps) for e in engines], RoundHistory)
            for s, e in enumerate(engines):
                group.record(s, e.measure(0, float("nan"), 0.0))
        else:
            first, live = group.load_state_dict(resume, RoundHistory)
        hists, view = group.hists, group.view()
        start, before = time.perf_counter(), view.wall_seconds
        done = first
        bar = tqdm(range(first, cfg.rounds), initial=first, total=cfg.rounds, unit="round",
                   disable=not progress or engines[0].shard.rank > 0, dynamic_ncols=True)
        for t in bar:
            parts = []
            for s in live:
                e = engines[s]
                if e.faults is not None:
                    e.online = e.faults.online(t)
                parts.append((s, e.participants(), e.opt.lr_at(t)))
            losses = local_train(group, parts)
            done = t + 1
            evaluate = done % cfg.eval_every == 0 or done == cfg.rounds
            for s, clients, lr in parts:
                e = engines[s]
                try:
                    clients = e.check(t, clients)
                except Diverged as err:              # on_divergence=stop: this engine ends within the round
                    e.diverged[torch.from_numpy(err.nodes).to(e.device)] = True   # out of the last row
                    group.record(s, e.measure(t, losses[s], 0.0, lr))
                    hists[s].diverged = {"round": t, "nodes": err.nodes.tolist(), "message": str(err)}
                    hists[s].rounds_run = t
                    live.remove(s)
                    continue
                sent = e.communicate(t, clients)
                if not group.single:
                    e.keep_block(group.state.theta[group.block(s)])
                e.bytes_total += sent
                if evaluate:
                    group.record(s, e.measure(done, losses[s], sent, lr))
            if live and evaluate:
                last = hists[live[0]].rows[-1]
                bar.set_postfix(acc=f"{last['acc_mean']:.3f}", xbar=f"{last['xbar_acc']:.3f}")
                if on_eval is not None:
                    on_eval(view)
            if not live:
                break
            if checkpointer is not None and checkpointer.step(done, cfg.rounds, view, before + time.perf_counter()
                                                              - start, lambda: group.state_dict(done, live)):
                break
        bar.close()
        for s, h in enumerate(hists):
            if s in live:
                h.rounds_run = done if view.interrupted else cfg.rounds
        group.finish(before + time.perf_counter() - start, "rounds_run", done)
        return view


def local_train(group, parts: list[tuple[int, Tensor, float]]) -> dict[int, float]:
    """Step 1 for the group's engines, ``parts`` [(engine index, participants, lr_t)]: each
    algorithm's :meth:`~vecgossip.algorithms.RoundAlgorithm.local_train` engine by engine (on its
    own rows: never bypassed); for replicas of an algorithm that keeps the default local work, that
    default (K_i steps of the configured optimiser) batched across them (:func:`local_sgd`).
    Returns each engine's mean minibatch loss."""
    engines = group.engines
    algo = engines[0].algorithm
    if group.single or type(algo).local_train is not RoundAlgorithm.local_train:
        return {s: engines[s].local_train(clients, lr) for s, clients, lr in parts}
    losses = local_sgd(group.state, [(engines[s], s * group.rows, clients, lr) for s, clients, lr in parts], algo.sam)
    return {s: loss for (s, _, _), loss in zip(parts, losses)}


def local_sgd(state: NodeState, parts: list, sam: bool | None = None, step=None) -> list[float]:
    """K_i local iterations of the clients of engines over row blocks of ``state``, ``parts``
    [(engine, its first row in state, sorted clients, lr_t)]: step k trains each engine's clients
    with K_i > k, on batches drawn from that engine's sampler for all of them in one call (so
    results do not depend on the chunk size), in ONE chunked pass (:func:`local_iteration`; a chunk
    spans engines when their lr and optimiser agree). Sharded (one engine), this rank trains its
    own clients and the losses are gathered. ``sam``: force SAM on or off (None: optim.sam);
    ``step``: an algorithm's own update of a chunk. Returns each part's mean minibatch loss."""
    opts = [e.local_opt(sam) for e, _, _, _ in parts]
    for e, _, clients, _ in parts:
        if e.opt.reset_momentum:
            e.state.momentum[e.local(clients)[0]] = 0
    ks = [e.steps[clients] for e, _, clients, _ in parts]
    losses: list[list[Tensor]] = [[] for _ in parts]
    head = parts[0][0]
    for k in range(max([int(kk.max()) for kk in ks if kk.numel()], default=0)):
        acts = []               # (part, rows in state, this rank's batches, the clients as numpy)
        for i, ((e, offset, clients, _), kk) in enumerate(zip(parts, ks)):
            act = clients[kk > k]
            if act.numel():
                batch = e.sampler.next(act)                    # every participant's draws, on every rank
                rows, blk, act_np = e.local(act)               # this rank trains its own
                if blk != slice(0, act.numel()):
                    batch = Minibatch(batch.idx[blk], batch.weight[blk], None if batch.crops is None else batch.crops[blk])
                acts.append((i, rows + offset, batch, act_np))
        if not acts:
            continue
        one = len(acts) == 1
        rows = acts[0][1] if one else torch.cat([a[1] for a in acts])
        batch = acts[0][2] if one else Minibatch(torch.cat([a[2].idx for a in acts]),
                                                 torch.cat([a[2].weight for a in acts]),
                                                 None if acts[0][2].crops is None
                                                 else torch.cat([a[2].crops for a in acts]))
        segments = []          # runs of engines sharing (lr, optimiser)
        for i, r, _, _ in acts:
            lr, opt = parts[i][3], opts[i]
            if segments and segments[-1][1] == lr and segments[-1][2] == opt:
                segments[-1][0] += r.numel()
            else:
                segments.append([r.numel(), lr, opt])
        here = local_iteration(state, rows, batch, 0, segments, head.cfg.train_chunk, head.forward,
                               head.train_data, step)
        lo = 0
        for i, r, _, act_np in acts:
            sh = parts[i][0].shard
            losses[i].append(sh.gather_rows(here[lo:lo + r.numel()], sh.counts(act_np), models=False))
            lo += r.numel()
    return [float(torch.cat(v).mean()) if v else float("nan") for v in losses]
