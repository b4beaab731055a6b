"""Setup of the tick engine (paper 1): validate, build, summarize, write outputs."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from omegaconf import DictConfig, OmegaConf

from vecgossip.runtime.allocator import MODES as MALLOC_MODES
from vecgossip.core.errors import ConfigError
from vecgossip.core.options import get_alpha, get_choice, get_int, get_num
from vecgossip.config.checks import pick_device, resolve_chunk, validate_topology
from vecgossip.data.dataset import EVAL_SETS, eval_indices
from vecgossip.data.sampling import SAMPLERS, Shards, dirichlet_label_probs, prior_mix_probs
from vecgossip.data.partition import dirichlet as dirichlet_partition, iid as iid_partition, local_test_sets
from vecgossip.data.registry import load
from vecgossip.engines.group import Group, Lazy
from vecgossip.engines.tick.engine import History, TickConfig, TickEngine
from vecgossip.core.faults import FaultConfig, Faults
from vecgossip.core.guard import POLICIES
from vecgossip.core.metrics import first_reach_tick, most_reach_tick, plateau_delay_tick
from vecgossip.models.execution import (PROBE_NODES, Decision, ExecForward, adopt, cache_key, decide,
                                        per_client_forward, train_chunk as exec_chunk)
from vecgossip.models import autocast_forward, build as build_model, get_model, make_forward, state_dtype
from vecgossip.core.optim import SGDConfig
from vecgossip.runtime.outputs import plot_accuracy, plot_layers, plots
from vecgossip.core.files import write_csv, write_json, write_npy
from vecgossip.network.peers import Links, TLConfig
from vecgossip.runtime.shard import Shard
from vecgossip.core.state import Layout, init_theta, new_state
from vecgossip.network.topology import DIRECTED, PER_ROUND, REGISTERED, build, names
from vecgossip.algorithms import Streams, load_for



def parse_t_acq(v: Any) -> tuple[int, int]:
    """``t_acq``: an int (fixed interval) or [lo, hi] (uniform integer draw, inclusive)."""
    if isinstance(v, int) and not isinstance(v, bool) and v >= 1:
        return v, v
    if OmegaConf.is_list(v) or isinstance(v, (list, tuple)):
        v = list(v)
        if (len(v) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
                and 1 <= v[0] <= v[1]):
            return v[0], v[1]
    raise ConfigError(f"engine.t_acq (t_acq) must be an integer >= 1 or [lo, hi] with 1 <= lo <= hi, got {v!r}")


def fault_config(cfg: DictConfig) -> FaultConfig:
    f = OmegaConf.to_container(cfg.faults, resolve=True)
    try:
        fc = FaultConfig(**{**f, "crash_nodes": tuple(f.get("crash_nodes") or ())})
    except (TypeError, ValueError) as err:
        raise ConfigError(str(err)) from None
    nodes = fc.crash_nodes
    if nodes and (min(nodes) < 0 or max(nodes) >= cfg.topology.n):
        raise ConfigError(f"faults.crash_nodes must be node indices in [0, {cfg.topology.n}), got {list(nodes)}")
    return fc


def make_faults(cfg: DictConfig, n: int) -> Faults | None:
    """The run's fault draws, from their own stream (seed, 3); None when no fault is configured."""
    fc = fault_config(cfg)
    return Faults(fc, n, np.random.default_rng([int(cfg.seed), 3])) if fc.active else None


def validate(cfg: DictConfig) -> None:
    """Fail fast, before any work, on every option the tick engine depends on."""
    if OmegaConf.select(cfg, "topology.name") in PER_ROUND + DIRECTED:
        what = "is directed" if cfg.topology.name in DIRECTED else "draws a new graph every round"
        raise ConfigError(f"topology={cfg.topology.name} {what}: it needs a round-engine "
                          f"method (method=dpsgd|dfedavg|...); the tick engine takes {', '.join(names(False))}")
    validate_topology(cfg, names(False), "nodes")
    spec = REGISTERED.get(cfg.topology.name)
    if spec is not None and spec.weights is not None:
        raise ConfigError(f"topology={cfg.topology.name} is a mixing matrix W: the tick engine gossips along a "
                          "graph's links (register its graph: register_topology(name, graph))")
    if OmegaConf.select(cfg, "model.average_buffers") is False:
        raise ConfigError("model.average_buffers=false is a round-engine option; the tick engine averages "
                          "a model's BatchNorm statistics with it (allowed here: true)")
    get_int(cfg, "averaging.R", 1)
    comp = OmegaConf.select(cfg, "averaging.compression")
    if isinstance(comp, bool) or not isinstance(comp, (int, float)) or not 0.0 < comp <= 1.0:
        raise ConfigError(f"averaging.compression (compression) must be a probability in (0, 1], got {comp!r}")
    get_num(cfg, "averaging.beta", 0.0, 1.0)
    algo = algorithm(cfg)
    if algo.server and (cfg.engine.tl.enabled or cfg.averaging.compression < 1.0):
        raise ConfigError(f"method={cfg.get('method_name')} is FedAvg with a relay server ({algo.name()}): it takes "
                          "neither the transfer-learning peer rule (tl) nor weight compression (compression < 1)")
    if algo.peer_rule:
        get_int(cfg, "engine.tl.period", 1)
        get_int(cfg, "engine.tl.samples", 1)
        add, drop = get_num(cfg, "engine.tl.add_at", 0.0, 1.0), get_num(cfg, "engine.tl.drop_at", 0.0, 1.0)
        if add <= drop:
            raise ConfigError(f"engine.tl.add_at ({add}) must be above engine.tl.drop_at ({drop})")
    get_alpha(cfg)
    get_int(cfg, "data.batch_size", 1)
    get_choice(cfg, "data.eval_set", EVAL_SETS)
    get_choice(cfg, "data.sampler", SAMPLERS)
    if cfg.data.eval_set == "local" and algo.server:
        raise ConfigError("data.eval_set=local evaluates every node on its own test images: a relay server "
                          f"(method={cfg.get('method_name')}) reports the server's model alone")
    get_int(cfg, "data.local_eval_size", 1)
    parse_t_acq(cfg.engine.t_acq)
    get_int(cfg, "engine.max_ticks", 1)
    get_int(cfg, "engine.eval_every", 1)
    for key in ("engine.eval_chunk", "engine.train_chunk"):
        if OmegaConf.select(cfg, key) != "auto":
            get_int(cfg, key, 1)
    get_num(cfg, "engine.threshold", 0.0, 1.0)
    get_num(cfg, "engine.most_frac", 0.0, 1.0, hi_open=True)   # "more than" all nodes is never reached
    get_choice(cfg, "engine.malloc", MALLOC_MODES)
    get_choice(cfg, "engine.on_divergence", POLICIES)
    fault_config(cfg)
    try:
        SGDConfig(**OmegaConf.to_container(cfg.optim, resolve=True))  # its own checks
    except (TypeError, ValueError) as err:
        raise ConfigError(str(err)) from None


def algorithm(cfg: DictConfig):
    """The run's algorithm (config node ``algorithm``; :func:`vecgossip.algorithms.load_for`)."""
    return load_for(cfg, "tick")


def build_engine(cfg: DictConfig, shard: Shard | None = None, data: tuple | None = None) -> TickEngine:
    """Everything from the config: graph, initial state, data, samplers, engine. Sharded, every
    rank draws all N initial models (the same numbers as one process) block by block and keeps its rows.
    ``data``: the (train, test) data sets already loaded (replicas share them)."""
    device = pick_device(cfg.device)
    seed = int(cfg.seed)
    np_rng = np.random.default_rng(seed)
    init_gen = torch.Generator().manual_seed(seed)
    sample_gen = torch.Generator(device=device).manual_seed(seed + 1)

    graph = build(cfg.topology.name, cfg.topology.n, cfg.topology.get("k"), seed=seed)
    n = graph.n
    train, test = data if data is not None else load_data(cfg, device)
    layout, forward = model_parts(cfg, train.shape, train.num_classes)
    sharded = shard is not None and shard.sharded
    theta = init_theta(layout, n, cfg.model.init, init_gen, shared=cfg.model.shared_init, device=device,
                       rows=(shard.lo, shard.hi) if sharded else None).to(run_dtype(cfg))
    if cfg.model.broadcast_init:   # Fig. 6: one averaged model given to every node before training
        theta[:] = theta.mean(0, keepdim=True)
    state = new_state(layout, theta)
    decision = choose_exec(cfg, forward, layout, theta, train, device, shard)

    ei = eval_indices(test.labels, "fixed100" if cfg.data.eval_set == "local" else cfg.data.eval_set)
    eval_x, eval_y = test.batch(ei)
    probs, shards = node_data(cfg, n, train, np_rng, device)
    eval_idx = None
    if cfg.data.eval_set == "local":        # each node's own test images, drawn like its training data
        shares = (probs.cpu().numpy().astype(np.float64) if probs is not None
                  else np.ones((n, train.num_classes)))
        idx = local_test_sets(test.labels.cpu().numpy(), shares, int(cfg.data.local_eval_size),
                              np.random.default_rng([seed, 6]))
        eval_idx = torch.from_numpy(idx).to(device)

    tl, algo = cfg.engine.tl, algorithm(cfg)
    beta = getattr(algo.params, "beta", float("nan"))      # the engine's default for average()
    tcfg = TickConfig(t_acq=parse_t_acq(cfg.engine.t_acq), R=int(algo.R), beta=float(beta),
                      correction=bool(algo.correction), compression=float(algo.compression),
                      server=0 if algo.server else None,
                      tl=TLConfig(tl.period, tl.add_at, tl.drop_at, tl.samples) if algo.peer_rule else None,
                      batch_size=cfg.data.batch_size,
                      max_ticks=cfg.engine.max_ticks, eval_every=cfg.engine.eval_every,
                      early_stop=bool(cfg.engine.early_stop), threshold=float(cfg.engine.threshold),
                      most_frac=float(cfg.engine.most_frac), on_divergence=cfg.engine.on_divergence,
                      timeout=int(cfg.faults.timeout),
                      eval_chunk=resolve_chunk(cfg.engine.eval_chunk, device, int(eval_y.numel()), cfg.model.name),
                      train_chunk=exec_chunk(cfg.engine.train_chunk, decision,
                                             resolve_chunk("auto", device, cfg.data.batch_size, cfg.model.name)))
    links = Links(graph, active=tcfg.tl is None)   # TL: every node starts with no peers
    return TickEngine(tcfg, state, links, forward, SGDConfig(**OmegaConf.to_container(cfg.optim, resolve=True)), train, probs,
                      eval_x, eval_y, sample_gen, np_rng, test=test, faults=make_faults(cfg, n), shard=shard,
                      shards=shards, eval_idx=eval_idx, algorithm=algo, random=Streams.of(seed, device),
                      execution=decision)


def node_data(cfg: DictConfig, n: int, train, np_rng: np.random.Generator,
              device: torch.device) -> tuple[torch.Tensor | None, Shards | None]:
    """What each node trains on under ``data.sampler`` (data.py): (N, C) label mixes (None: IID),
    and for ``shards`` the disjoint shards (cut by partition.dirichlet, or evenly at random for
    IID, from their own stream (seed, 5)), whose label proportions are then the label mixes."""
    alpha, kind = cfg.data.alpha, cfg.data.sampler
    if kind == "shards":
        labels = train.labels.cpu().numpy()
        rng = np.random.default_rng([int(cfg.seed), 5])
        part = (iid_partition(labels.size, n, rng) if alpha is None
                else dirichlet_partition(labels, n, float(alpha), rng, min_samples=1))
        mix = part.label_counts(labels, train.num_classes) / part.sizes[:, None]          # (N, C)
        return torch.from_numpy(mix).to(device, torch.float32), Shards.of(part.members, part.offsets, device)
    make = prior_mix_probs if kind == "prior_mix" else dirichlet_label_probs
    probs = make(n, alpha, np_rng, train.num_classes)
    return (None if probs is None else probs.to(device)), None


def model_parts(cfg: DictConfig, shape: tuple[int, int, int], num_classes: int) -> tuple[Layout, ExecForward]:
    """The model's Layout (parameters, then BatchNorm statistics) and its forward, from
    ``model.*`` and ``precision`` (both engines): batched and per client, which :func:`choose_exec`
    picks between (model.exec)."""
    m, norm = cfg.model, OmegaConf.select(cfg, "model.norm")
    precision = OmegaConf.select(cfg, "precision", default="fp32")
    module = build_model(m.name, shape, num_classes, norm)
    per_client = per_client_forward(build_model(m.name, shape, num_classes, norm).to("meta"))
    return (Layout.of(module),
            ExecForward(make_forward(m.name, m.impl, shape, num_classes, norm, precision),
                        autocast_forward(per_client) if precision == "bf16" else per_client))


def choose_exec(cfg: DictConfig, forward: ExecForward, layout: Layout, theta: torch.Tensor, train,
                device: torch.device, shard: Shard | None = None) -> Decision:
    """Resolve ``model.exec`` for ``forward`` (execution.py): as configured, cached, or measured on
    a probe of the first chunk (the first two rows of ``theta`` on the first 2 x batch training
    images). Sharded, rank 0 decides and every rank takes its answer."""
    precision = OmegaConf.select(cfg, "precision", default="fp32")
    batch = int(cfg.data.batch_size)
    key = cache_key(cfg.model.name, device, batch, precision, OmegaConf.select(cfg, "model.norm"))

    def probe():
        rows = min(PROBE_NODES, theta.shape[0])
        idx = torch.arange(rows * batch, device=device) % train.labels.numel()
        x, y = train.batch(idx)
        return layout, theta[:rows].clone(), x.reshape(rows, batch, *x.shape[1:]), y.reshape(rows, batch)
    explicit = get_model(cfg.model.name).explicit is not None and cfg.model.impl == "explicit"
    sharded = shard is not None and shard.sharded
    decision = decide(forward, cfg.model.exec, key, probe, explicit) if not sharded or shard.rank == 0 else None
    if sharded:
        decision = shard.broadcast(decision)
        adopt(forward, decision.as_dict())
    return decision


def load_data(cfg: DictConfig, device: torch.device) -> tuple:
    """The run's (train, test) data sets, on ``device``."""
    d, dtype = cfg.data, run_dtype(cfg)
    return (load(d.name, d.root, True, d.download, device, d.augment, dtype),
            load(d.name, d.root, False, d.download, device, dtype=dtype))


def run_dtype(cfg: DictConfig) -> torch.dtype:
    """The state's and the batches' dtype: float64 under precision=fp64, else float32."""
    return state_dtype(OmegaConf.select(cfg, "precision", default="fp32"))


def build_replicas(cfgs: list[DictConfig], data: tuple | None = None, build=None) -> Group:
    """``replicas=S`` of either engine: the replica configs' engines (``build(cfg, data=...)``,
    default this engine's :func:`build_engine`), built one at a time over one stacked state
    (engines/group.py), the data loaded once."""
    build = build_engine if build is None else build
    data = data if data is not None else load_data(cfgs[0], pick_device(cfgs[0].device))
    return Group(Lazy(lambda s: build(cfgs[s], data=data), len(cfgs)))


def summarize(cfg: DictConfig, hist: History, engine: TickEngine) -> dict:
    ticks = np.array([r["tick"] for r in hist.rows])
    acc = np.stack(hist.acc)
    thr, frac = float(cfg.engine.threshold), float(cfg.engine.most_frac)
    return {
        "engine": "tick",
        "name": cfg.get("name", "run"),
        "n_nodes": engine.n,
        "n_reported": int(acc.shape[1]),
        "data": engine.train_data.source,
        "threshold": thr,
        "method": cfg.get("method_name", "gossip"),
        "algorithm": engine.algorithm.name(),
        "method_params": engine.algorithm.hyperparameters(),
        "first_reach_tick": first_reach_tick(ticks, acc, thr),
        "most_reach_tick": most_reach_tick(ticks, acc, thr, frac),
        "plateau_delay_tick": plateau_delay_tick(ticks, acc.mean(1), hist.t_first_average),
        "first_average_tick": hist.t_first_average,
        "ticks_run": hist.ticks_run,
        "stopped_early": hist.stopped_early,
        "diverged": hist.diverged,                     # on_divergence=stop: where and which nodes
        "nodes_diverged": int(engine.diverged.sum()),  # isolated (on_divergence=isolate)
        "messages": None if engine.faults is None else {"sent": engine.faults.sent, "lost": engine.faults.lost},
        "wall_seconds": round(hist.wall_seconds, 3),
        "ticks_per_second": round(hist.ticks_run / max(hist.wall_seconds, 1e-9), 3),
        "final_acc_mean": float(acc[-1].mean()),
        "initial_layer_variance": hist.initial_variance,   # before any training or averaging
        "execution": engine.execution.as_dict(),          # model.exec: the paths taken, how, timings
    }


def write_outputs(out: Path, cfg: DictConfig, hist: History, summary: dict) -> None:
    df = pd.DataFrame(hist.rows)
    write_csv(df, out / "metrics.csv")
    write_npy(np.stack(hist.acc).astype(np.float32), out / "accuracy.npy")
    write_npy(df.tick.to_numpy(), out / "ticks.npy")
    title = f"{summary['name']}: N={summary['n_nodes']}"
    summary["plot_errors"] = plots(out, {
        "accuracy.png": lambda: plot_accuracy(df, summary, out / "accuracy.png", title),
        "variance.png": lambda: plot_layers(df, "var_", "mean weight variance (dot: at initialisation)",
                                            out / "variance.png", title, summary["initial_layer_variance"]),
        "weight_difference.png": lambda: plot_layers(df, "wdiff_", "weight difference", out / "weight_difference.png",
                                                     title)})
    write_json(summary, out / "summary.json")  # last: its presence marks a complete run


def default_algorithm(cfg: TickConfig):
    """The algorithm a bare :class:`TickConfig` describes (engines built without a config file)."""
    from vecgossip.algorithms.fedavg_tick import FedAvgTick, Params as FedParams
    from vecgossip.algorithms.gossip import GossipLearning, Params
    if cfg.server is not None:
        return FedAvgTick(FedParams(cfg.beta, cfg.correction))
    return GossipLearning(Params(cfg.beta, cfg.R, cfg.correction, cfg.compression, cfg.tl is not None))
