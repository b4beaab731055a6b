"""The tick engine's history and checkpoint (runtime/checkpoint.py): everything that evolves, at
the start of a tick, so that a resumed run continues bit for bit."""
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
    stopped: str | None = None     # privacy.target_epsilon: why the run ended before max_ticks
    parts: list = field(default_factory=list)   # replicas' combined history: each replica's own


def state_dict(engine, t: int, hist: History) -> dict:
    """Everything of ``engine`` that evolves, at the start of tick ``t``: enough to continue bit for bit."""
    st, sched = engine.state, engine.schedule
    return {"t": t, "theta": st.theta, "momentum": st.momentum, "iters": st.iters, "extra": st.extra,
            "buffers": buffer_rows(engine.buffers), "next_train": sched.next_train.copy(),
            "active": engine.links.active.copy(), "t_first_average": engine.t_first_average,
            "diverged": engine.diverged.copy(), "since": engine.transport.since.copy(),
            "online_now": sched.online_now,
            "faults": None if engine.faults is None else engine.faults.state(),
            "gen": checkpoint.generator_state(engine.gen), "rng": checkpoint.rng_state(engine.rng),
            "random": engine.random.state(), "execution": engine.execution.as_dict(),
            "privacy": None if engine.privacy is None else engine.privacy.state(),
            "adversary": None if engine.adversary is None else engine.adversary.state(),
            "clock": None if engine.seconds is None else {"schedule": sched.state(),
                                                          "transport": engine.transport.state_dict()},
            "hist": dataclasses.asdict(hist)}


def buffer_rows(buf) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The buffers as (rows, total[rows], count, var_total): only the rows holding models (an
    empty buffer's sum is zero), which keeps a checkpoint at ~2 copies of the (N, P) state."""
    rows = torch.nonzero(buf.count > 0).flatten()
    return rows, buf.total[rows], buf.count, buf.var_total


def load_state_dict(engine, d: dict) -> tuple[int, History]:
    """Put a :func:`state_dict` back into ``engine``; returns (its tick, its history)."""
    st, buf = engine.state, engine.buffers
    for dst, src in ((st.theta, d["theta"]), (st.momentum, d["momentum"]), (st.iters, d["iters"])):
        checkpoint.copy_in(dst, src)
    rows, total, buf_count, var_total = d["buffers"]
    buf.clear(torch.arange(st.n, device=engine.device))
    checkpoint.copy_in(buf.total, total, rows)
    buf.count.copy_(buf_count)
    buf.held = buf.count.cpu().numpy().astype(np.float64)       # the host's copy (who averages)
    buf.var_total.copy_(var_total)
    for k, v in d["extra"].items():     # an algorithm's declared state: into its (maybe stacked) rows
        if k in st.extra:
            checkpoint.copy_in(st.extra[k], v)
        else:
            st.extra[k] = v.to(engine.device)
    load_control(engine, d)
    return d["t"], History(**d["hist"])


def load_control(engine, d: dict) -> None:
    """The schedules, links, counters and random streams of a :func:`state_dict`."""
    engine.schedule.next_train[:] = d["next_train"]
    engine.links.active[:] = d["active"]
    engine.diverged[:] = d["diverged"]
    engine.transport.since[:] = d["since"]
    engine.schedule.online_now = d["online_now"]
    if engine.faults is not None:
        engine.faults.load(d["faults"])
    engine.wiring.rewire()
    engine.t_first_average = d["t_first_average"]
    checkpoint.set_generator_state(engine.gen, d["gen"])
    checkpoint.set_rng_state(engine.rng, d["rng"])
    engine.random.load(d["random"])
    engine.execution = restore(engine.forward, d.get("execution"))
    if engine.privacy is not None:
        engine.privacy.load(d["privacy"])
    if engine.adversary is not None:
        engine.adversary.load(d["adversary"])
    if engine.seconds is not None:
        engine.schedule.load(d["clock"]["schedule"])
        engine.transport.load_state_dict(d["clock"]["transport"])
