"""Replicas in one batch: S independent simulations of one config (seeds seed .. seed+S-1, each
with its own graph, initial models, samplers, T_acq draws or partitions, and per-replica scalars)
advanced in lockstep as ONE stacked simulation: :class:`TickReplicas` (paper 1's tick engine) and
:class:`RoundReplicas` (paper 2's round engine; its local iterations are the batched part).

The node axis of one (S x N, P) state holds every replica's nodes, replica s in rows
s N .. (s+1) N - 1; each replica's :class:`~vecgossip.engines.tick.TickEngine` sees its block as
its state (a view), so the graph is block diagonal by construction: a replica's sends, buffers,
averages and corrections touch its own block only. What costs is batched across replicas: the
training step of every node due at a tick (all replicas' batches drawn from their own generators,
then one chunked step over the union, :func:`~vecgossip.engines.tick.train_rows`) and the
evaluation of every reported node. What is small and per replica (schedules, sends and averages of
50-node blocks, metrics rows, the transfer-learning rule) runs replica by replica.

Every node's numbers are independent of the chunk it is computed in (``models.layers.pair``; SAM's
per-node norm likewise, ``optim.sam_point``), and
each replica draws from its own generators in its own order, so replica s's outputs equal those of
a separate run with seed + s (tests/test_replicas.py). A replica that stops (early stop, or a
divergence under on_divergence=stop) stops training; the others go on.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm.auto import tqdm

from ..guard import Diverged
from ..metrics import evaluate, reach_count
from ..partition import Minibatch
from ..stack import NodeState
from ..algorithms.base import RoundAlgorithm
from .rounds import RoundEngine, RoundHistory, local_iteration
from .tick import History, TickEngine, train_rows

Tensor = torch.Tensor


def stack_states(engines) -> tuple[list, NodeState]:
    """One (S x N, P) state for the engines (an iterable: each engine is taken as it is built, so
    its own state is freed before the next one is made): its state is copied into its row block
    and becomes a view of it. Returns the engines as a list and the stacked state."""
    out, state, count = [], None, len(engines)
    for e in engines:
        if state is None:
            n, p, dev, dt = e.state.n, e.state.theta.shape[1], e.state.theta.device, e.state.theta.dtype
            state = NodeState(e.layout, torch.empty(count * n, p, device=dev, dtype=dt),
                              torch.empty(count * n, p, device=dev, dtype=dt),
                              torch.empty(count * n, dtype=e.state.iters.dtype, device=dev))
        rows = slice(len(out) * n, (len(out) + 1) * n)
        for name in ("theta", "momentum", "iters"):
            block = getattr(state, name)[rows]
            block.copy_(getattr(e.state, name))
            setattr(e.state, name, block)
        for name, v in e.state.extra.items():       # an algorithm's declared per-node state
            if name not in state.extra:
                state.extra[name] = v.new_empty(count * n, *v.shape[1:])
            block = state.extra[name][rows]
            block.copy_(v)
            e.state.extra[name] = block
        out.append(e)
    return out, state


class Lazy:
    """A sized iterable of S engines built one at a time (``make(s)``), for :func:`stack_states`."""

    def __init__(self, make, count: int) -> None:
        self.make, self.count = make, count

    def __len__(self) -> int:
        return self.count

    def __iter__(self):
        return (self.make(s) for s in range(self.count))


@dataclass
class Combined(History):
    """What the run hooks see (``on_eval``, the tracker, the checkpointer): every replica's metrics
    rows with a ``replica`` column, in the order they were made; ``parts`` are the replicas' own
    histories (what each one's outputs are written from)."""

    parts: list[History] = field(default_factory=list)


class Stacked:
    """What both replica kinds share: ``engines`` over row blocks of ``state`` (``rows`` each), the
    combined history's rows, and checkpoints holding the stacked tensors once."""

    engines: list
    state: NodeState
    rows: int
    combined: History | RoundHistory

    def _record(self, s: int, hists: list, measured: tuple[dict, np.ndarray]) -> None:
        row, acc = measured
        hists[s].rows.append(row)
        hists[s].acc.append(acc)
        self.combined.rows.append({"replica": s, **row})

    def state_dict(self, t: int, hists: list, live: list[int]) -> dict:
        """The stacked tensors once, each replica's own ``state_dict`` without them."""
        parts = []
        for e, h in zip(self.engines, hists):
            d = e.state_dict(t, h)
            for k in ("theta", "momentum", "iters", "extra"):
                d.pop(k, None)
            parts.append(d)
        st = self.state
        return {"t": t, "theta": st.theta, "momentum": st.momentum, "iters": st.iters, "extra": dict(st.extra),
                "replicas": parts,
                "live": list(live), "rows": self.combined.rows, "wall_seconds": self.combined.wall_seconds}

    def load_state_dict(self, d: dict) -> tuple[int, list, list[int]]:
        hists = []
        for s, (e, part) in enumerate(zip(self.engines, d["replicas"])):
            block = slice(s * self.rows, (s + 1) * self.rows)
            _, h = e.load_state_dict({**part, "theta": d["theta"][block], "momentum": d["momentum"][block],
                                      "iters": d["iters"][block],
                                      "extra": {k: v[block] for k, v in d.get("extra", {}).items()}})
            hists.append(h)
        self.combined.rows = list(d["rows"])
        self.combined.wall_seconds = d["wall_seconds"]
        return d["t"], hists, list(d["live"])


class TickReplicas(Stacked):
    """S tick engines over row blocks of one stacked state (see the module docstring)."""

    def __init__(self, engines) -> None:
        """``engines``: a list, or a :class:`Lazy` that builds them one at a time."""
        engines, state = stack_states(engines)
        first = engines[0]
        if any(e.shard.sharded for e in engines):
            raise ValueError("replicas run in one process")
        if not all(torch.equal(e.eval_x, first.eval_x) and torch.equal(e.eval_y, first.eval_y) for e in engines):
            raise ValueError("replicas must share the evaluation set")
        self.engines, self.n, self.cfg, self.state = engines, first.n, first.cfg, state
        self.rows = self.n
        same = all(e.sgd == first.sgd for e in engines)
        self.same_sgd = same                     # else a training chunk never spans two replicas

    @property
    def train_data(self):
        return self.engines[0].train_data

    # -- one tick -------------------------------------------------------------------------------
    def tick(self, t: int, live: list[int], hists: list[History]) -> None:
        """Steps 1-3 of tick t for the live replicas: their draws, one batched training step over
        all their due nodes, then each replica's sends and averages. A replica whose nodes diverge
        under on_divergence=stop ends here (its last row measured), like a separate run."""
        jobs = []                                 # (replica, due, online, rows in the stack, images, crops)
        for s in live:
            e = self.engines[s]
            due, online = e.due(t)
            if due is None or due.size == 0:
                continue
            mine, images, crops = e.draw(due)
            jobs.append((s, due, online, mine + s * self.n, images, crops))
        if not jobs:
            return
        rows = np.concatenate([j[3] for j in jobs])
        images = torch.cat([j[4] for j in jobs])
        crops = None if jobs[0][5] is None else torch.cat([j[5] for j in jobs])
        segments = ([(rows.size, self.engines[0].sgd)] if self.same_sgd
                    else [(j[3].size, self.engines[j[0]].sgd) for j in jobs])
        first = self.engines[0]
        bad = train_rows(self.state, rows, images, crops, self.train_data, first.forward, segments,
                         first.cfg.train_chunk, first.guard)
        bad_rows = rows[bad]
        for s, due, online, mine, _, _ in jobs:
            e = self.engines[s]
            e.reschedule(due)
            bad_s = bad_rows[(bad_rows >= s * self.n) & (bad_rows < (s + 1) * self.n)] - s * self.n
            try:
                e.after_training(t, due, bad_s, online)
            except Diverged as err:              # on_divergence=stop: this replica ends within the tick
                e.diverged[err.nodes] = True
                self._record(s, hists, self.engines[s].measure(t))
                hists[s].diverged = {"tick": t, "nodes": err.nodes.tolist(), "message": str(err)}
                hists[s].ticks_run = t
                live.remove(s)

    def evaluate(self, live: list[int]) -> dict[int, tuple[Tensor, Tensor]]:
        """Accuracy and loss of every live replica's reported nodes, in one batched evaluation."""
        blocks = [self.engines[s].report + s * self.n for s in live]
        rows = np.concatenate(blocks)
        whole = rows.size == self.state.n and bool((rows == np.arange(self.state.n)).all())
        theta = self.state.theta if whole else self.state.theta[torch.from_numpy(rows).to(self.state.theta.device)]
        first = self.engines[0]
        acc, loss = evaluate(first.forward, first.layout, theta, first.eval_x, first.eval_y, first.cfg.eval_chunk)
        out, lo = {}, 0
        for s, b in zip(live, blocks):
            out[s] = acc[lo:lo + b.size], loss[lo:lo + b.size]
            lo += b.size
        return out

    # -- the clock ----------------------------------------------------------------------------------
    def run(self, progress: bool = True, on_eval=None, checkpointer=None, resume: dict | None = None) -> Combined:
        """Advance every replica to max_ticks or its own early stop; hooks as in
        :meth:`TickEngine.run`, called with the :class:`Combined` history."""
        cfg, engines = self.cfg, self.engines
        self.combined = Combined()
        if resume is None:
            t, live, hists = 0, list(range(len(engines))), [History() for _ in engines]
            for e, h in zip(engines, hists):
                h.initial_variance = {f"var_{k}": float(v) for k, v in zip(e.layout.layers, e.layer_variances())}
        else:
            t, hists, live = self.load_state_dict(resume)
        self.combined.parts = hists
        period = cfg.tl.period if cfg.tl is not None else None
        start, before = time.perf_counter(), self.combined.wall_seconds
        bar = tqdm(total=cfg.max_ticks, initial=t, unit="tick", disable=not progress, dynamic_ncols=True)
        while t < cfg.max_ticks and live:
            self.tick(t, live, hists)
            if period is not None and t % period == 0:
                for s in live:
                    engines[s].algorithm.peers(engines[s], t)
            if live and t % cfg.eval_every == 0:
                evaluated = self.evaluate(live)
                for s in list(live):
                    e = engines[s]
                    self._record(s, hists, e.measure(t, evaluated[s]))
                    acc = hists[s].acc[-1]
                    if cfg.early_stop and (acc >= cfg.threshold).sum() >= reach_count(e.report.size, cfg.most_frac):
                        hists[s].stopped_early, hists[s].ticks_run = True, t + 1
                        live.remove(s)
                if live:
                    last = hists[live[0]].rows[-1]
                    bar.set_postfix(acc=f"{last['acc_mean']:.3f}", replicas=len(live))
                if on_eval is not None:
                    on_eval(self.combined)
            if not live:
                bar.update(1)
                t += 1
                break
            nxt = [min(int(engines[s].next_train.min()) for s in live),
                   (t // cfg.eval_every + 1) * cfg.eval_every, cfg.max_ticks]
            if period is not None:
                nxt.append((t // period + 1) * period)
            nxt = min(nxt)
            bar.update(nxt - t)
            t = nxt
            if checkpointer is not None and checkpointer.step(t, cfg.max_ticks, self.combined,
                                                              before + time.perf_counter() - start,
                                                              lambda: self.state_dict(t, hists, live)):
                break
        bar.close()
        wall = before + time.perf_counter() - start
        self.combined.wall_seconds = wall
        for s, (e, h) in enumerate(zip(engines, hists)):
            if s in live:
                h.ticks_run = t
            h.t_first_average = e.t_first_average
            h.wall_seconds = wall
            h.interrupted = self.combined.interrupted
        self.combined.ticks_run = t
        gone = [f"replica {s}: {h.diverged['message']}" for s, h in enumerate(hists) if h.diverged is not None]
        if gone:                                  # the others finished: their outputs are complete
            self.combined.diverged = {"message": "; ".join(gone)}
        return self.combined


@dataclass
class CombinedRounds(RoundHistory):
    """:class:`Combined` for the round engine: every replica's rows (``replica`` column) and ``parts``."""

    parts: list[RoundHistory] = field(default_factory=list)


class RoundReplicas(Stacked):
    """S round engines over row blocks of one stacked state: every replica's local steps are
    batched together (each replica's participants, its own sampler's batches, one chunked
    :func:`~vecgossip.optim.local_step` over the union per local iteration); gossip (or the
    server average) and metrics run replica by replica on the replica's block."""

    def __init__(self, engines) -> None:
        """``engines``: a list, or a :class:`Lazy` that builds them one at a time."""
        engines, state = stack_states(engines)
        first = engines[0]
        if any(e.shard.sharded for e in engines):
            raise ValueError("replicas run in one process")
        self.engines, self.m, self.cfg, self.state = engines, first.m, first.cfg, state
        self.rows = self.m
        self.views = [e.state.theta for e in engines]

    def local_train(self, parts: list[tuple[int, Tensor, float]]) -> dict[int, float]:
        """:meth:`RoundEngine.local_train` of every replica s in ``parts`` [(s, clients, lr_t)] at
        once: step k trains each replica's clients with K_i > k, their batches drawn from the
        replica's sampler; a chunk spans replicas when their lr and optimiser agree. Returns each
        replica's mean minibatch loss."""
        st, m, first = self.state, self.m, self.engines[0]
        if type(first.algorithm).local_train is not RoundAlgorithm.local_train:
            # the algorithm's own local work: replica by replica, each on its block (never bypassed)
            return {s: self.engines[s].local_train(clients, lr) for s, clients, lr in parts}
        opts = {s: self.engines[s].local_opt(self.engines[s].algorithm.sam) for s, _, _ in parts}
        for s, clients, _ in parts:
            if self.engines[s].opt.reset_momentum:
                self.engines[s].state.momentum[clients] = 0
        ks = {s: self.engines[s].steps[clients] for s, clients, _ in parts}
        losses: dict[int, list[Tensor]] = {s: [] for s, _, _ in parts}
        steps = max([int(ks[s].max()) for s, c, _ in parts if c.numel()], default=0)
        for k in range(steps):
            acts = [(s, c[ks[s] > k], lr) for s, c, lr in parts]
            acts = [(s, a, lr, self.engines[s].sampler.next(a)) for s, a, lr in acts if a.numel()]
            rows = torch.cat([a + s * m for s, a, _, _ in acts])
            batch = Minibatch(torch.cat([b.idx for *_, b in acts]), torch.cat([b.weight for *_, b in acts]),
                              None if acts[0][3].crops is None else torch.cat([b.crops for *_, b in acts]))
            segments = [(sum(a.numel() for _, a, _, _ in group), group[0][2], opts[group[0][0]])
                        for group in self._groups(acts, opts)]      # runs of replicas sharing (lr, optimiser)
            here = local_iteration(st, rows, batch, 0, segments, self.cfg.train_chunk, first.forward,
                                   first.train_data)
            lo = 0
            for s, a, _, _ in acts:
                losses[s].append(here[lo:lo + a.numel()])
                lo += a.numel()
        return {s: float(torch.cat(v).mean()) if v else float("nan") for s, v in losses.items()}

    def _groups(self, acts, opts):
        groups = []
        for act in acts:
            if groups and groups[-1][-1][2] == act[2] and opts[groups[-1][-1][0]] == opts[act[0]]:
                groups[-1].append(act)
            else:
                groups.append([act])
        return groups

    def _keep_view(self, s: int) -> None:
        """Gossip swaps an engine's theta with its scratch buffer: put the result back in the
        replica's block of the stack (the scratch keeps the other buffer)."""
        e, view = self.engines[s], self.views[s]
        if e.state.theta.data_ptr() != view.data_ptr():
            out = e.state.theta
            view.copy_(out)
            e.state.theta, e.scratch = view, out

    # -- the rounds -----------------------------------------------------------------------------------
    def run(self, progress: bool = True, on_eval=None, checkpointer=None, resume: dict | None = None) -> CombinedRounds:
        """Every replica to ``cfg.rounds`` (a replica that diverges under on_divergence=stop ends
        there); hooks as in :meth:`RoundEngine.run`, called with the :class:`CombinedRounds`."""
        cfg, engines = self.cfg, self.engines
        self.combined = CombinedRounds()
        if resume is None:
            first, live = 0, list(range(len(engines)))
            hists = [RoundHistory(spectral_gaps=e.gaps) for e in engines]
            for s, e in enumerate(engines):
                self._record(s, hists, e.measure(0, float("nan"), 0.0))
        else:
            first, hists, live = self.load_state_dict(resume)
        self.combined.parts = hists
        start, before = time.perf_counter(), self.combined.wall_seconds
        done = first
        bar = tqdm(range(first, cfg.rounds), initial=first, total=cfg.rounds, unit="round", disable=not progress,
                   dynamic_ncols=True)
        for t in bar:
            parts = []
            for s in live:
                e = engines[s]
                if e.faults is not None:
                    e.online = e.faults.online(t)
                parts.append((s, e.participants(), e.opt.lr_at(t)))
            losses = self.local_train(parts)
            done = t + 1
            for s, clients, lr in parts:
                e = engines[s]
                try:
                    clients = e.check(t, clients)
                except Diverged as err:              # on_divergence=stop: this replica ends within the round
                    e.diverged[torch.from_numpy(err.nodes).to(e.device)] = True
                    self._record(s, hists, e.measure(t, losses[s], 0.0, lr))
                    hists[s].diverged = {"round": t, "nodes": err.nodes.tolist(), "message": str(err)}
                    hists[s].rounds_run = t
                    live.remove(s)
                    continue
                sent = e.communicate(t, clients)
                self._keep_view(s)
                e.bytes_total += sent
                if done % cfg.eval_every == 0 or done == cfg.rounds:
                    self._record(s, hists, e.measure(done, losses[s], sent, lr))
            if live and (done % cfg.eval_every == 0 or done == cfg.rounds):
                last = hists[live[0]].rows[-1]
                bar.set_postfix(acc=f"{last['acc_mean']:.3f}", xbar=f"{last['xbar_acc']:.3f}")
                if on_eval is not None:
                    on_eval(self.combined)
            if not live:
                break
            if checkpointer is not None and checkpointer.step(done, cfg.rounds, self.combined,
                                                              before + time.perf_counter() - start,
                                                              lambda: self.state_dict(done, hists, live)):
                break
        bar.close()
        wall = before + time.perf_counter() - start
        self.combined.wall_seconds = wall
        for s, h in enumerate(hists):
            if s in live:
                h.rounds_run = done if self.combined.interrupted else cfg.rounds
            h.wall_seconds = wall
            h.interrupted = self.combined.interrupted
        self.combined.rounds_run = done
        gone = [f"replica {s}: {h.diverged['message']}" for s, h in enumerate(hists) if h.diverged is not None]
        if gone:
            self.combined.diverged = {"message": "; ".join(gone)}
        return self.combined
