"""The state layout every run has: a :class:`Group` of engines over row blocks of ONE stacked state.

A plain run is a group of one engine over its whole state (under torchrun: this rank's rows of it,
:mod:`vecgossip.runtime.shard`). ``replicas=S`` (:mod:`vecgossip.runtime.replicas`) is a group of S engines, one per
replica (seed + s, its own graph, initial models, samplers, T_acq draws or partitions), over one
(S x N, P) state: replica s owns rows s N .. (s+1) N - 1 and its engine sees that block as its state
(a view), so the graph is block diagonal by construction: a replica's sends, buffers, averages,
corrections and gossip touch its own block only.

Each engine has ONE run loop, written over a group (:meth:`TickEngine.run_group
<vecgossip.engines.tick.TickEngine.run_group>`, :meth:`RoundEngine.run_group
<vecgossip.engines.rounds.RoundEngine.run_group>`); what costs is batched across the group's
engines there (the tick engine's training step of every due node and its evaluation; the round
engine's default local steps), what is small and per engine (schedules, sends, averages, gossip,
metrics rows) runs engine by engine. An algorithm sees one engine's services and its rows: it
cannot tell whether it runs alone, as a replica or as a shard.

This module holds what the loops share: building the stacked state, each engine's history, the
combined rows the run hooks see, and the checkpoint (the stacked tensors once, each engine's
control state beside them).
"""
from __future__ import annotations

import torch

from vecgossip.core.state import NodeState

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
    """A sized iterable of S engines built one at a time (``make(s)``), for :class:`Group`."""

    def __init__(self, make, count: int) -> None:
        self.make, self.count = make, count

    def __len__(self) -> int:
        return self.count

    def __iter__(self):
        return (self.make(s) for s in range(self.count))


class Group:
    """Engines over row blocks of one stacked state (see the module docstring).

    ``Group([engine])`` is a plain run (or one rank's shard): its state is the engine's own.
    ``Group(engines)`` with several (a list, or a :class:`Lazy` that builds them one at a time)
    stacks their states, replica s in rows ``s * rows ..``; replicas run in one process.

    The run loop keeps one history per engine (``hists``, what each one's outputs are written
    from); the run hooks (``on_eval``, the tracker, the checkpointer) see :meth:`view`: the single
    engine's history, or for replicas a history of the same kind whose ``rows`` are every
    replica's rows with a ``replica`` column and whose ``parts`` are the replicas' histories."""

    def __init__(self, engines) -> None:
        if isinstance(engines, Lazy) or len(engines) > 1:
            engines, state = stack_states(engines)
            if any(e.shard.sharded for e in engines):
                raise ValueError("replicas run in one process")
        else:
            engines = list(engines)
            state = engines[0].state
        self.engines, self.state = engines, state
        self.rows = engines[0].state.n          # rows per engine
        self.cfg = engines[0].cfg
        self.combined = None

    @property
    def single(self) -> bool:
        return len(self.engines) == 1

    def block(self, s: int) -> slice:
        return slice(s * self.rows, (s + 1) * self.rows)

    def run(self, progress: bool = True, on_eval=None, checkpointer=None, resume: dict | None = None):
        """The engines' run loop (:meth:`run_group` of their class) over this group."""
        return type(self.engines[0]).run_group(self, progress, on_eval, checkpointer, resume)

    # -- histories --------------------------------------------------------------------------------
    def start(self, hists: list, history_type) -> None:
        """Set the histories the loop records into; replicas also get the combined view."""
        self.hists = hists
        if not self.single:
            self.combined = history_type(parts=hists)

    def view(self):
        """What the run hooks see and the loop returns (see the class docstring)."""
        return self.hists[0] if self.single else self.combined

    def record(self, s: int, measured: tuple) -> None:
        """Engine s's metrics row and accuracies (``measured``: its ``measure``'s result)."""
        row, acc = measured
        self.hists[s].rows.append(row)
        self.hists[s].acc.append(acc)
        if not self.single:
            self.combined.rows.append({"replica": s, **row})

    def amend(self, s: int, fill) -> None:
        """Engine s's rows measured before all their columns were known: ``fill(rows)`` completes
        them in place and returns their indices; the combined view's copies follow."""
        changed = fill(self.hists[s].rows)
        if changed and not self.single:
            mine = [row for row in self.combined.rows if row["replica"] == s]
            for k in changed:
                mine[k].update(self.hists[s].rows[k])

    def finish(self, wall: float, end: str, pos: int) -> None:
        """After the loop: every history's wall time and interruption flag; replicas: the combined
        position ``end`` (ticks_run / rounds_run) and a note of the replicas that diverged."""
        view = self.view()
        for h in self.hists:
            h.wall_seconds = wall
            h.interrupted = view.interrupted
        if self.single:
            return
        setattr(self.combined, end, pos)
        gone = [f"replica {s}: {h.diverged['message']}" for s, h in enumerate(self.hists) if h.diverged is not None]
        if gone:                                  # the others finished: their outputs are complete
            self.combined.diverged = {"message": "; ".join(gone)}

    # -- checkpoints (checkpoint.py) ----------------------------------------------------------------
    def state_dict(self, t: int, live: list[int]) -> dict:
        """The stacked tensors once and each engine's own ``state_dict`` without them."""
        parts = []
        for e, h in zip(self.engines, self.hists):
            d = e.state_dict(t, h)
            for k in ("theta", "momentum", "iters", "extra"):
                d.pop(k, None)
            parts.append(d)
        st, view = self.state, self.view()
        return {"t": t, "theta": st.theta, "momentum": st.momentum, "iters": st.iters, "extra": dict(st.extra),
                "engines": parts, "live": list(live), "rows": None if self.single else self.combined.rows,
                "wall_seconds": view.wall_seconds}

    def load_state_dict(self, d: dict, history_type) -> tuple[int, list[int]]:
        """Put a :meth:`state_dict` back; returns (its position, the live engines). ``d`` is
        consumed: its entries are dropped once copied in, so a resumed run does not keep the
        checkpoint's copy of the state beside its own for the rest of the run (results/resume_memory_cpu/); the engines copy it in
        with :func:`vecgossip.runtime.checkpoint.copy_in`, which hands the file's pages back block by
        block, so the peak while loading is the state's too (results/resume_memory_cpu/)."""
        hists = []
        for s, (e, part) in enumerate(zip(self.engines, d["engines"])):
            block = self.block(s)
            _, h = e.load_state_dict({**part, "theta": d["theta"][block], "momentum": d["momentum"][block],
                                      "iters": d["iters"][block],
                                      "extra": {k: v[block] for k, v in d.get("extra", {}).items()}})
            hists.append(h)
        self.start(hists, history_type)
        if not self.single:
            self.combined.rows = list(d["rows"])
        self.view().wall_seconds = d["wall_seconds"]
        t, live = d["t"], list(d["live"])
        d.clear()
        return t, live
