"""What both engines are built from: the data sets, the model (its layout, its batched and
per-client forward, which ``model.exec`` picks between), the initial models, the fault draws and
the random streams, from a validated run (:class:`vecgossip.config.load.Run`)."""
from __future__ import annotations

import numpy as np
import torch

from vecgossip.core.faults import Faults
from vecgossip.core.state import Layout, init_theta
from vecgossip.data.registry import get_spec, load
from vecgossip.data.text import load_text
from vecgossip.engines.group import Group, Lazy
from vecgossip.models import autocast_forward, build as build_model, get_model, make_forward, state_dtype
from vecgossip.models.chunks import resolve_chunk
from vecgossip.models.execution import PROBE_CAP, Decision, ExecForward, adopt, cache_key, decide, per_client_forward
from vecgossip.runtime.device import pick_device
from vecgossip.runtime.shard import Shard


def load_data(cfg, device: torch.device) -> tuple:
    """The run's (train, test) data sets, on ``device``, in the state's dtype."""
    d, dtype = cfg.data, run_dtype(cfg)
    if get_spec(d.name).kind == "text":          # the roles are the nodes: the run's n picks them
        return load_text(d, cfg.topology.n, device)
    return (load(d.name, d.root, True, d.download, device, d.augment, dtype),
            load(d.name, d.root, False, d.download, device, dtype=dtype))


def run_dtype(cfg) -> torch.dtype:
    """The state's and the batches' dtype: float64 under precision=fp64, else float32."""
    return state_dtype(cfg.precision)


def model_parts(cfg, shape: tuple[int, int, int], num_classes: int) -> tuple[Layout, ExecForward]:
    """The model's Layout (parameters, then BatchNorm statistics) and its forward, from
    ``model.*`` and ``precision`` (both engines): batched and per client, which :func:`choose_exec`
    picks between (model.exec)."""
    m, precision = cfg.model, cfg.precision
    module = build_model(m.name, shape, num_classes, m.norm, m.width)
    per_client = per_client_forward(build_model(m.name, shape, num_classes, m.norm, m.width).to("meta"))
    return (Layout.of(module),
            ExecForward(make_forward(m.name, m.impl, shape, num_classes, m.norm, precision, m.width),
                        autocast_forward(per_client) if precision == "bf16" else per_client))


def choose_exec(cfg, forward: ExecForward, layout: Layout, theta: torch.Tensor, train, device: torch.device,
                shard: Shard | None = None) -> Decision:
    """Resolve ``model.exec`` for ``forward`` (models/execution.py): as configured, cached, or
    measured on a probe of the chunk the batched path will run (the first ``engine.train_chunk``
    rows of ``theta``, at most PROBE_CAP, on the first training images). Sharded, rank 0 decides
    and every rank takes its answer."""
    batch = cfg.data.batch_size
    key = cache_key(cfg.model.name, device, batch, cfg.precision, cfg.model.norm, layout.size, tuple(train.shape))
    configured = cfg.engine.train_chunk
    chunk = resolve_chunk("auto" if configured == "auto" else configured, device, batch, cfg.model.name)

    def probe():
        rows = min(chunk, PROBE_CAP, theta.shape[0])
        idx = torch.arange(rows * batch, device=device) % train.labels.numel()
        x, y = train.batch(idx)
        return layout, theta[:rows].clone(), x.reshape(rows, batch, *x.shape[1:]), y.reshape(rows, batch)
    model = get_model(cfg.model.name)
    # a hand-batched image forward also evaluates batched (shared first-layer columns); a text
    # model's batched LSTM is measured against the per-node one in evaluation too
    explicit = model.explicit is not None and cfg.model.impl == "explicit" and model.inputs == "image"
    sharded = shard is not None and shard.sharded
    decision = decide(forward, cfg.model.exec, key, probe, explicit) if not sharded or shard.rank == 0 else None
    if sharded:
        decision = shard.broadcast(decision)
        adopt(forward, decision.as_dict())
    return decision


def initial_models(cfg, layout: Layout, n: int, device: torch.device, shard: Shard | None) -> torch.Tensor:
    """(N', P) initial models (``model.init``, one shared model with ``model.shared_init``). Sharded,
    every rank draws all N (the same numbers as one process) block by block and keeps its rows."""
    sharded = shard is not None and shard.sharded
    return init_theta(layout, n, cfg.model.init, torch.Generator().manual_seed(cfg.seed),
                      shared=cfg.model.shared_init, device=device,
                      rows=(shard.lo, shard.hi) if sharded else None).to(run_dtype(cfg))


def make_faults(cfg, n: int) -> Faults | None:
    """The run's fault draws, from their own stream (seed, 3); None when no fault is configured."""
    return Faults(cfg.faults, n, np.random.default_rng([cfg.seed, 3])) if cfg.faults.active else None


def build_replicas(runs: list, build, data: tuple | None = None) -> Group:
    """``replicas=S`` of either engine: the replica runs' engines (``build(run, data=...)``), built
    one at a time over one stacked state (engines/group.py), the data loaded once."""
    data = data if data is not None else load_data(runs[0].cfg, pick_device(runs[0].cfg.device))
    return Group(Lazy(lambda s: build(runs[s], data=data), len(runs)))
