"""The round engine's history and checkpoint (runtime/checkpoint.py): everything that evolves,
before a round, so that a resumed run continues bit for bit."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import torch

from vecgossip.models.execution import restore
from vecgossip.runtime import checkpoint


@dataclass
class RoundHistory:
    rows: list[dict] = field(default_factory=list)
    acc: list[np.ndarray] = field(default_factory=list)     # each (m,): local-test accuracy per client
    rounds_run: int = 0
    wall_seconds: float = 0.0
    spectral_gaps: list[float] = field(default_factory=list)
    interrupted: bool = False      # stopped by a signal: a checkpoint holds the state, no summary
    diverged: dict | None = None   # on_divergence=stop: {"round": t, "nodes": [...]} where it stopped
    stopped: str | None = None     # privacy.target_epsilon: why the run ended before its last round
    parts: list = field(default_factory=list)   # replicas' combined history: each replica's own


def state_dict(engine, t: int, hist: RoundHistory) -> dict:
    """Everything of ``engine`` that evolves, before round ``t``: enough to continue bit for bit."""
    st, smp = engine.state, engine.sampler
    return {"t": t, "theta": st.theta, "momentum": st.momentum, "iters": st.iters, "extra": dict(st.extra),
            "sampler": (smp.order, smp.step), "sampler_gen": checkpoint.generator_state(smp.gen),
            "rng": checkpoint.rng_state(engine.rng), "random": engine.random.state(),
            "execution": engine.execution.as_dict(), "bytes_total": engine.bytes_total,
            "diverged": engine.diverged.clone(), "global_model": engine.server.model, "online": engine.online.copy(),
            "faults": None if engine.faults is None else engine.faults.state(),
            "adversary": None if engine.adversary is None else engine.adversary.state(),
            "privacy": None if engine.privacy is None else engine.privacy.state(),
            "clock": None if engine.timer is None else engine.timer.state(),
            "hist": dataclasses.asdict(hist)}


def load_state_dict(engine, d: dict) -> tuple[int, RoundHistory]:
    """Put a :func:`state_dict` back into ``engine``; returns (its round, its history)."""
    st, smp = engine.state, engine.sampler
    for dst, src in ((st.theta, d["theta"]), (st.momentum, d["momentum"]), (st.iters, d["iters"]),
                     (smp.order, d["sampler"][0]), (smp.step, d["sampler"][1]),
                     *((st.extra[k], v) for k, v in d.get("extra", {}).items())):
        checkpoint.copy_in(dst, src)
    checkpoint.set_generator_state(smp.gen, d["sampler_gen"])
    checkpoint.set_rng_state(engine.rng, d["rng"])
    engine.random.load(d["random"])
    engine.execution = restore(engine.forward, d.get("execution"))
    engine.bytes_total = d["bytes_total"]
    engine.diverged.copy_(d["diverged"])
    engine.diverged_host[:] = engine.diverged.cpu().numpy()
    engine.server.model = d["global_model"]
    engine.online[:] = d["online"]
    if engine.comm is not None:
        engine.comm.online = engine.online
    if engine.faults is not None:
        engine.faults.load(d["faults"])
    if engine.adversary is not None:
        engine.adversary.load(d["adversary"])
    if engine.privacy is not None:
        engine.privacy.load(d["privacy"])
    if engine.timer is not None:
        engine.timer.load(d["clock"])
    if engine.mixing is not None and bool(engine.diverged.any()):
        engine.mixing.remove(torch.nonzero(engine.diverged).flatten().cpu().numpy())
    hist = RoundHistory(**d["hist"])
    if engine.comm is not None:
        engine.comm.gaps = hist.spectral_gaps
    return d["t"], hist
