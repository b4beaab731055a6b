"""Setup of the round engine (paper 2): validate, build, summarize, write outputs."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch
from omegaconf import DictConfig, OmegaConf

from vecgossip.runtime.allocator import MODES as MALLOC_MODES
from vecgossip.core.errors import ConfigError
from vecgossip.config.checks import eval_images, pick_device, resolve_chunk, validate_topology
from vecgossip.core.options import get_alpha, get_choice, get_int, get_num
from vecgossip.data.dataset import eval_indices
from vecgossip.data.registry import get_spec
from vecgossip.engines.rounds.engine import EvalSets, RoundConfig, RoundEngine, RoundHistory
from vecgossip.core.guard import POLICIES
from vecgossip.network.mixing import MixingSchedule
from vecgossip.core.optim import LocalSGDConfig
from vecgossip.runtime.outputs import plot_rounds, plots
from vecgossip.core.files import write_csv, write_json, write_npy
from vecgossip.data.partition import PARTITIONS, ClientSampler, default_test_size, local_test_sets, make
from vecgossip.core.state import init_theta, new_state
from vecgossip.network.topology import (BALANCED, DIRECTED, PER_ROUND, REGISTERED, PerRound, build,
                                        doubly_stochastic, names)
from vecgossip.algorithms import Streams, load_for
from vecgossip.models.execution import train_chunk as exec_chunk
from vecgossip.composition.tick import (build_replicas as stack_replicas, choose_exec, fault_config, load_data,
                                    make_faults, model_parts, run_dtype)


def _optional_int(cfg: DictConfig, key: str, minimum: int) -> int | None:
    return None if OmegaConf.select(cfg, key) is None else get_int(cfg, key, minimum)


def partition_kind(cfg: DictConfig) -> str:
    """data.partition, where null means: iid when data.alpha is null, else dirichlet (as paper 1's
    alpha knob reads)."""
    kind = OmegaConf.select(cfg, "data.partition")
    if kind is None:
        return "iid" if OmegaConf.select(cfg, "data.alpha") is None else "dirichlet"
    return kind


def validate(cfg: DictConfig) -> None:
    """Fail fast, before any data is loaded or memory allocated, on every round-engine option."""
    m = get_int(cfg, "topology.n", 2, "clients")
    algo = algorithm(cfg)
    if not algo.server:     # FedAvg / FedSAM: a server, no graph
        validate_topology(cfg, names(), "clients")
        spec = REGISTERED.get(cfg.topology.name)
        if spec is not None and spec.weights is not None and algo.mixing == "doubly_stochastic" \
                and not doubly_stochastic(spec.weights):
            raise ConfigError(f"topology={cfg.topology.name}: its W is row- but not column-stochastic, and "
                              f"{algo.name()} needs a doubly stochastic W (the average is preserved only then)")
        if cfg.topology.name in DIRECTED and algo.mixing == "doubly_stochastic" \
                and cfg.topology.name not in BALANCED:
            raise ConfigError(f"topology={cfg.topology.name} is directed and unbalanced: no doubly stochastic W "
                              f"for {algo.name()} (method={cfg.get('method_name')}); push-sum (method=sgp) runs on "
                              f"it, or a balanced one: {', '.join(BALANCED)}")
    get_int(cfg, "engine.rounds", 1, "rounds")
    steps, epochs = _optional_int(cfg, "engine.local_steps", 1), _optional_int(cfg, "engine.local_epochs", 1)
    if (steps is None) == (epochs is None):
        raise ConfigError(f"set exactly one of engine.local_steps (local_steps) and engine.local_epochs "
                          f"(local_epochs); got local_steps={steps}, local_epochs={epochs}")
    q = OmegaConf.select(cfg, "engine.gossip_steps")
    if isinstance(q, bool) or not isinstance(q, int) or q < 1:
        raise ConfigError(f"engine.gossip_steps (gossip_steps, Q) must be an integer >= 1, got {q!r}")
    get_num(cfg, "engine.participation", 0.0, 1.0, lo_open=True)
    get_int(cfg, "engine.eval_every", 1)
    for key in ("engine.eval_chunk", "engine.train_chunk"):
        if OmegaConf.select(cfg, key) != "auto":
            get_int(cfg, key, 1)
    get_choice(cfg, "engine.malloc", MALLOC_MODES)
    get_choice(cfg, "engine.on_divergence", POLICIES)
    fault_config(cfg)
    try:
        LocalSGDConfig(**OmegaConf.to_container(cfg.optim, resolve=True))
    except (TypeError, ValueError) as err:
        raise ConfigError(str(err)) from None

    spec = get_spec(cfg.data.name)
    get_int(cfg, "data.batch_size", 1)
    if OmegaConf.select(cfg, "data.partition") is not None:
        get_choice(cfg, "data.partition", PARTITIONS)
    part = partition_kind(cfg)
    alpha = get_alpha(cfg)
    if alpha is not None and part != "dirichlet":
        raise ConfigError(f"data.alpha (alpha)={alpha} has no effect with data.partition={part}; "
                          "use partition=dirichlet or alpha=null")
    if m > spec.n_train:
        raise ConfigError(f"topology.n (clients)={m} is more than the {spec.n_train} training samples of "
                          f"data={spec.name}: every client needs its own samples")
    if part == "dirichlet":
        if alpha is None:
            raise ConfigError("data.partition=dirichlet needs data.alpha (alpha) > 0, e.g. alpha=0.3; got null")
        least = get_int(cfg, "data.min_samples", 1)
        if m * least > spec.n_train:
            raise ConfigError(f"topology.n (clients)={m} x data.min_samples={least} is more than the "
                              f"{spec.n_train} training samples of data={spec.name}")
    if part == "pathological":
        c = get_int(cfg, "data.classes_per_client", 1)
        if c > spec.num_classes:
            raise ConfigError(f"data.classes_per_client (classes_per_client) must be <= {spec.num_classes} "
                              f"(the classes of data={spec.name}), got {c}")
        if m * c > spec.n_train:
            raise ConfigError(f"topology.n (clients) x classes_per_client = {m * c} shards is more than the "
                              f"{spec.n_train} training samples of data={spec.name}")
    size = _optional_int(cfg, "data.local_test_size", 1)
    if size is not None and size > spec.n_test:
        raise ConfigError(f"data.local_test_size must be <= {spec.n_test} (the test set), got {size}")
    _optional_int(cfg, "data.global_test_size", spec.num_classes)


def algorithm(cfg: DictConfig):
    """The run's algorithm (config node ``algorithm``; :func:`vecgossip.algorithms.load_for`)."""
    return load_for(cfg, "rounds")


def build_engine(cfg: DictConfig, shard=None, data: tuple | None = None) -> RoundEngine:
    """Everything from the config; ``data``: the (train, test) data sets loaded already (replicas)."""
    device = pick_device(cfg.device)
    seed = int(cfg.seed)
    m = int(cfg.topology.n)
    d = cfg.data
    train, test = data if data is not None else load_data(cfg, device)
    labels = train.labels.cpu().numpy()
    part = make(partition_kind(cfg), labels, m, np.random.default_rng([seed, 0]), d.alpha, d.classes_per_client,
                d.min_samples)
    counts = part.label_counts(labels, train.num_classes)
    test_labels = test.labels.cpu().numpy()
    size = d.local_test_size or default_test_size(test_labels, counts)
    local = local_test_sets(test_labels, counts, size, np.random.default_rng([seed, 1]))
    shared = (torch.arange(test.labels.numel(), device=device) if d.global_test_size is None
              else eval_indices(test.labels, "fixed100", per_label=d.global_test_size // train.num_classes))

    layout, forward = model_parts(cfg, train.shape, train.num_classes)
    sharded = shard is not None and shard.sharded           # a rank draws all, keeps its clients' rows
    theta = init_theta(layout, m, cfg.model.init, torch.Generator().manual_seed(seed),
                       shared=cfg.model.shared_init, device=device, rows=(shard.lo, shard.hi) if sharded else None
                       ).to(run_dtype(cfg))
    decision = choose_exec(cfg, forward, layout, theta, train, device, shard)
    e, algo = cfg.engine, algorithm(cfg)
    rcfg = RoundConfig(rounds=e.rounds, local_steps=e.local_steps, local_epochs=e.local_epochs,
                       gossip_steps=e.gossip_steps, participation=float(e.participation), server=algo.server,
                       eval_every=e.eval_every, on_divergence=e.on_divergence,
                       train_chunk=exec_chunk(e.train_chunk, decision,
                                              resolve_chunk("auto", device, d.batch_size, cfg.model.name)),
                       eval_chunk=resolve_chunk(e.eval_chunk, device, size, cfg.model.name),
                       average_buffers=OmegaConf.select(cfg, "model.average_buffers", default=True),
                       eval_images=eval_images(cfg.model.name, device))
    if algo.server:
        mixing = None
    elif cfg.topology.name in PER_ROUND:
        mixing = MixingSchedule(graphs=PerRound(cfg.topology.name, m, cfg.topology.get("k"), seed), device=device,
                                dtype=theta.dtype, kind=algo.mixing)
    else:
        spec = REGISTERED.get(cfg.topology.name)
        mixing = MixingSchedule(graph=build(cfg.topology.name, m, cfg.topology.get("k"), seed=seed), device=device,
                                dtype=theta.dtype, weights=None if spec is None else spec.weights, kind=algo.mixing)
    sampler = ClientSampler(part, d.batch_size, torch.Generator(device=device).manual_seed(seed + 1),
                            train.augment, device)
    return RoundEngine(rcfg, new_state(layout, theta), mixing, forward,
                       LocalSGDConfig(**OmegaConf.to_container(cfg.optim, resolve=True)), train, sampler,
                       EvalSets(test, torch.from_numpy(local).to(device), shared),
                       np.random.default_rng([seed, 2]), faults=make_faults(cfg, m), shard=shard, algorithm=algo,
                       random=Streams.of(seed, device), execution=decision)


def build_replicas(cfgs: list[DictConfig], data: tuple | None = None):
    """``replicas=S``: the replica configs' engines over one stacked state (engines/group.py)."""
    return stack_replicas(cfgs, data, build_engine)


def summarize(cfg: DictConfig, hist: RoundHistory, engine: RoundEngine) -> dict:
    df = pd.DataFrame(hist.rows)
    last = df.iloc[-1]
    sizes = engine.sampler.sizes.cpu().numpy()
    gaps = hist.spectral_gaps
    return {
        "engine": "rounds",
        "name": cfg.get("name", "run"),
        "method": cfg.get("method_name", "dfedavg"),
        "n_clients": engine.m,
        "data": engine.train_data.source,
        "model": cfg.model.name,
        "model_params": engine.layout.size,
        "topology": "server" if engine.algorithm.server else cfg.topology.name,
        "algorithm": engine.algorithm.name(),
        "method_params": engine.algorithm.hyperparameters(),
        "partition": partition_kind(cfg),
        "alpha": cfg.data.alpha,
        "final": {k: float(last[k]) for k in ("acc_mean", "acc_min", "acc_max", "global_acc_mean", "xbar_acc",
                                              "consensus_distance", "train_loss_mean")},
        "best": {k: float(df[k].max()) for k in ("acc_mean", "global_acc_mean", "xbar_acc")},
        "rounds_run": hist.rounds_run,
        "diverged": hist.diverged,                           # on_divergence=stop: where and which clients
        "clients_diverged": int(engine.diverged.sum()),      # isolated (on_divergence=isolate)
        "messages": None if engine.faults is None else {"sent": engine.faults.sent, "lost": engine.faults.lost},
        "spectral_gap": float(np.mean(gaps)) if gaps else None,
        "spectral_gap_rounds": len(gaps),
        "bytes_cumulative_per_client": float(last["bytes_cumulative"]),
        "client_samples": {"min": int(sizes.min()), "mean": float(sizes.mean()), "max": int(sizes.max())},
        "local_test_size": int(engine.evals.local.shape[1]),
        "global_test_size": int(engine.evals.shared.numel()),
        "wall_seconds": round(hist.wall_seconds, 3),
        "seconds_per_round": round(hist.wall_seconds / max(1, hist.rounds_run), 4),
        "execution": engine.execution.as_dict(),          # model.exec: the paths taken, how, timings
    }


def write_outputs(out: Path, cfg: DictConfig, hist: RoundHistory, summary: dict) -> None:
    df = pd.DataFrame(hist.rows)
    write_csv(df, out / "metrics.csv")
    write_npy(np.stack(hist.acc).astype(np.float32), out / "accuracy.npy")
    write_npy(df["round"].to_numpy(), out / "rounds.npy")
    title = (f"{summary['method']} on {summary['topology']}: {summary['n_clients']} clients, "
             f"{summary['data']}, {summary['model']}")
    summary["plot_errors"] = plots(out, {"accuracy.png, consensus.png": lambda: plot_rounds(df, out, title)})
    write_json(summary, out / "summary.json")  # last: its presence marks a complete run
