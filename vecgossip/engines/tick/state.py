"""The tick engine's checkpoint (checkpoint.py): everything that evolves, at the start of a tick,
so that a resumed run continues bit for bit. :class:`TickCheckpoint` is a part of
:class:`~vecgossip.engines.tick.TickEngine`."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import torch

from vecgossip.runtime import checkpoint
from vecgossip.models.execution import restore

Tensor = torch.Tensor


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


class TickCheckpoint:
    """state_dict / load_state_dict of one engine."""

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
            checkpoint.copy_in(dst, src)
        rows, total, buf_count, var_total = d["buffers"]
        buf.clear(torch.arange(st.n, device=self.device))
        checkpoint.copy_in(buf.total, total, rows)
        buf.count.copy_(buf_count)
        buf.var_total.copy_(var_total)
        for k, v in d["extra"].items():     # an algorithm's declared state: into its (maybe stacked) rows
            if k in st.extra:
                checkpoint.copy_in(st.extra[k], v)
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
        self.execution = restore(self.forward, d.get("execution"))
        return d["t"], History(**d["hist"])
