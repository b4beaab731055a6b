"""Building the round engine (paper 2) from a validated run, and its summary and output files."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch

from vecgossip.adversaries.adversary import Adversary
from vecgossip.algorithms import Streams
from vecgossip.composition.parts import (build_replicas as stack_replicas, choose_exec, initial_models, load_data,
                                         make_faults, model_parts)
from vecgossip.core.files import write_csv, write_json, write_npy
from vecgossip.core.state import new_state
from vecgossip.data.dataset import eval_indices
from vecgossip.data.partition import ClientSampler, Partition, default_test_size, local_test_sets, make
from vecgossip.engines.clock.config import timer as clock_timer
from vecgossip.engines.group import Group
from vecgossip.engines.rounds.engine import RoundEngine
from vecgossip.engines.rounds.measures import EvalSets
from vecgossip.engines.rounds.state import RoundHistory
from vecgossip.models.chunks import eval_images, resolve_chunk
from vecgossip.models.execution import train_chunk as exec_chunk
from vecgossip.network.mixing import MixingSchedule
from vecgossip.privacy.private import PrivateTraining
from vecgossip.network.topology import PerRound, build
from vecgossip.runtime.device import pick_device
from vecgossip.runtime.outputs import plot_rounds, plots


def build_engine(run, shard=None, data: tuple | None = None) -> RoundEngine:
    """The round engine of a validated ``run`` (config/load.py): partitions, local test sets,
    initial models, mixing; ``data``: the (train, test) data sets loaded already (replicas)."""
    cfg, algo = run.cfg, run.algorithm
    device, seed, m, d = pick_device(cfg.device), cfg.seed, cfg.topology.n, cfg.data
    train, test = data if data is not None else load_data(cfg, device)
    part, evals = client_data(cfg, train, test, device)
    layout, forward = model_parts(cfg, train.shape, train.num_classes)
    theta = initial_models(cfg, layout, m, device, shard)     # sharded: a rank draws all, keeps its rows
    decision = choose_exec(cfg, forward, layout, theta, train, device, shard)
    options = cfg.engine.replace(
        train_chunk=exec_chunk(cfg.engine.train_chunk, decision,
                               resolve_chunk("auto", device, d.batch_size, cfg.model.name)),
        eval_chunk=resolve_chunk(cfg.engine.eval_chunk, device, evals.local.shape[1], cfg.model.name))
    sampler = ClientSampler(part, d.batch_size, torch.Generator(device=device).manual_seed(seed + 1),
                            train.augment, device, poisson=cfg.privacy.active and cfg.privacy.sampling == "poisson")
    return RoundEngine(options, algo, new_state(layout, theta), mixing_of(run, theta.dtype, device), forward,
                       cfg.optim, train, sampler, evals, np.random.default_rng([seed, 2]), faults=make_faults(cfg, m),
                       shard=shard, random=Streams.of(seed, device), execution=decision,
                       average_buffers=cfg.model.average_buffers is not False,
                       eval_images=eval_images(cfg.model.name, device),
                       adversary=Adversary(cfg.adversary, m, seed, device) if cfg.adversary.active else None,
                       privacy=(PrivateTraining(cfg.privacy, seed, d.batch_size / sampler.sizes_host,
                                                planned=cfg.engine.rounds * sampler.steps(cfg.engine.local_steps,
                                                                                          cfg.engine.local_epochs),
                                                smallest=int(sampler.sizes_host.min()), batch=d.batch_size)
                                if cfg.privacy.active else None),
                       timer=(clock_timer(cfg.clock, m, d.batch_size, seed, server=algo.server) if cfg.clock.enabled
                              else None))


def client_data(cfg, train, test, device: torch.device):
    """The clients' fixed partitions (seed, 0) and their evaluation sets: local test sets drawn
    with each client's label mix (seed, 1) and a shared global subset."""
    d, seed = cfg.data, cfg.seed
    if train.groups is not None:
        return text_client_data(cfg, train, test, device)
    labels = train.labels.cpu().numpy()
    part = make(d.partition_kind, labels, cfg.topology.n, np.random.default_rng([seed, 0]), d.alpha,
                d.classes_per_client, d.min_samples)
    counts = part.label_counts(labels, train.num_classes)
    test_labels = test.labels.cpu().numpy()
    size = d.local_test_size or default_test_size(test_labels, counts)
    local = local_test_sets(test_labels, counts, size, np.random.default_rng([seed, 1]))
    shared = (torch.arange(test.labels.numel(), device=device) if d.global_test_size is None
              else eval_indices(test.labels, "fixed100", per_label=d.global_test_size // train.num_classes))
    return part, EvalSets(test, torch.from_numpy(local).to(device), shared)


TEXT_SHARED = 500    # text: the shared subset's windows when data.global_test_size is null


def text_client_data(cfg, train, test, device: torch.device):
    """Text data: client i holds the training windows its data set gives it (``train.groups``: a
    role's, or an IID deal's) and is tested on ALL its own test windows (``test.groups``; ragged,
    :func:`~vecgossip.core.metrics.evaluate_ragged`); the shared subset is data.global_test_size
    (null: TEXT_SHARED) test windows drawn at random, stream (seed, 1)."""
    part, tests = (Partition(np.arange(int(d.groups[-1]), dtype=np.int64), np.asarray(d.groups, dtype=np.int64))
                   for d in (train, test))
    total = test.labels.numel()
    g = min(total, cfg.data.global_test_size or TEXT_SHARED)
    shared = np.sort(np.random.default_rng([cfg.seed, 1]).choice(total, g, replace=False))
    return part, EvalSets(test, tests.padded(device), torch.from_numpy(shared).to(device), tests.sizes)


def partition_name(cfg, train) -> str:
    """How the clients' data are split: the partition, or for text data (``train.groups``) the
    roles (``roles``, naturally non-IID) or the IID deal of the same windows (``iid deal``)."""
    if train.groups is None:
        return cfg.data.partition_kind
    return "roles" if cfg.data.split == "roles" else "iid deal"


def mixing_of(run, dtype: torch.dtype, device: torch.device) -> MixingSchedule | None:
    """The rounds' mixing matrices: none for a server algorithm, a redrawn graph's every round, or
    a static graph's (a registered W as given)."""
    cfg, algo = run.cfg, run.algorithm
    if algo.server:
        return None
    topo, m, k = cfg.topology.entry, cfg.topology.n, cfg.topology.k
    if topo.per_round:
        return MixingSchedule(graphs=PerRound(cfg.topology.name, m, k, cfg.seed), device=device, dtype=dtype,
                              kind=algo.mixing)
    return MixingSchedule(graph=build(cfg.topology.name, m, k, seed=cfg.seed), device=device, dtype=dtype,
                          weights=topo.weights, kind=algo.mixing)


def build_replicas(runs: list, data: tuple | None = None) -> Group:
    """``replicas=S``: the replica runs' engines over one stacked state (engines/group.py)."""
    return stack_replicas(runs, build_engine, data)


def summarize(run, hist: RoundHistory, engine: RoundEngine) -> dict:
    """summary.json of a round-engine run (paper 2's final and best accuracies, ...)."""
    cfg = run.cfg
    df = pd.DataFrame(hist.rows)
    last = df.iloc[-1]
    sizes = engine.sampler.sizes.cpu().numpy()
    gaps = hist.spectral_gaps
    return {
        "engine": "rounds",
        "name": cfg.name,
        "method": cfg.method_name,
        "n_clients": engine.m,
        "data": engine.train_data.source,
        "model": cfg.model.name,
        "model_params": engine.layout.size,
        "topology": "server" if engine.algorithm.server else cfg.topology.name,
        "algorithm": engine.algorithm.name(),
        "method_params": engine.algorithm.hyperparameters(),
        "partition": partition_name(cfg, engine.train_data),
        "alpha": cfg.data.alpha,
        "final": {k: float(last[k]) for k in ("acc_mean", "acc_min", "acc_max", "global_acc_mean", "xbar_acc",
                                              "consensus_distance", "train_loss_mean", "acc_chars") if k in last},
        "best": {k: float(df[k].max()) for k in ("acc_mean", "global_acc_mean", "xbar_acc")},
        "rounds_run": hist.rounds_run,
        "stopped": hist.stopped,                           # privacy.target_epsilon reached
        "diverged": hist.diverged,                           # on_divergence=stop: where and which clients
        "clients_diverged": int(engine.diverged.sum()),      # isolated (on_divergence=isolate)
        "adversary": None if engine.adversary is None else {   # the metrics are the honest clients'
            "attack": cfg.adversary.attack, "byzantine": np.flatnonzero(engine.adversary.byzantine).tolist()},
        "privacy": privacy_summary(cfg, engine, hist),
        "messages": None if engine.faults is None else {"sent": engine.faults.sent, "lost": engine.faults.lost},
        "spectral_gap": float(np.mean(gaps)) if gaps else None,
        "spectral_gap_rounds": len(gaps),
        "bytes_cumulative_per_client": float(last["bytes_cumulative"]),
        "client_samples": {"min": int(sizes.min()), "mean": float(sizes.mean()), "max": int(sizes.max())},
        "local_test_size": int(engine.evals.local.shape[1]),
        "global_test_size": int(engine.evals.shared.numel()),
        "clock": clock_summary(engine, df),
        "wall_seconds": round(hist.wall_seconds, 3),
        "seconds_per_round": round(hist.wall_seconds / max(1, hist.rounds_run), 4),
        "execution": engine.execution.as_dict(),          # model.exec: the paths taken, how, timings
    }


def clock_summary(engine: RoundEngine, df) -> dict | None:
    """summary.json's ``clock`` (clock.enabled): virtual seconds in all, per node busy (computing)
    and idle (sending, waiting at the barrier), and the virtual seconds at which the mean
    local-test accuracy first reached each of 50 ... 90% (null: not reached; measured every
    eval_every rounds, so a time to target is the first measured round's)."""
    tm = engine.timer
    if tm is None:
        return None
    hit = {f"{p}%": next((float(s) for a, s in zip(df["acc_mean"], df["seconds"]) if a >= p / 100), None)
           for p in (50, 60, 70, 80, 90)}
    return {"virtual_seconds": tm.seconds, "busy_mean": float(tm.busy.mean()), "idle_mean": float(tm.idle.mean()),
            "idle_max": float(tm.idle.max()), "step_seconds": {"min": float(tm.step_seconds.min()),
                                                              "mean": float(tm.step_seconds.mean()),
                                                              "max": float(tm.step_seconds.max())},
            "seconds_to_acc_mean": hit,
            **({} if tm.server is None else {"server": {"mbps": tm.server[0] * 8 / 1e6, "latency": tm.server[1],
                                                        "bytes_sent": tm.server_bytes}})}


def clock_nodes(engine: RoundEngine, hist: RoundHistory) -> pd.DataFrame | None:
    """clock_nodes.csv (clock.enabled): per node, what the clock drew (seconds a local step, up-
    and downlink Mbit/s; inf: no limit) and what it measured (seconds computing, seconds not
    computing: sending and waiting, bytes of its messages)."""
    tm = engine.timer
    if tm is None:
        return None
    return pd.DataFrame({"node": np.arange(tm.n), "step_seconds": tm.step_seconds,
                         "uplink_mbps": tm.uplink * 8 / 1e6, "downlink_mbps": tm.downlink * 8 / 1e6,
                         "busy_seconds": tm.busy, "idle_seconds": tm.idle, "bytes_sent": tm.bytes_sent})


def privacy_summary(cfg, engine: RoundEngine, hist: RoundHistory) -> dict | None:
    """summary.json's ``privacy``: the options, each client's epsilon (local DP, Opacus), and for a
    gossip algorithm on a static graph Muffliato's pairwise network DP of the same noise."""
    p = engine.privacy
    if p is None:
        return None
    eps = p.epsilons()
    out = {**p.cfg.model_dump(), "noise_multiplier_from": p.sigma_from,
           "epsilon": {"min": float(eps.min()), "mean": float(eps.mean()), "max": float(eps.max())},
           "steps": {"min": int(p.steps.min()), "max": int(p.steps.max())},
           "sampling_rate": {"min": float(p.rates.min()), "max": float(p.rates.max())},
           "per_sample": per_sample_path(engine.forward),
           "bound": p.cfg.accountant.upper() + " accountant: Poisson-subsampled Gaussian at q_i = B / n_i "
                    + ("(batches drawn that way: each sample in with rate q_i; the bound holds)"
                       if p.cfg.sampling == "poisson" else
                       "(batches are shuffled, not Poisson: the conventional bound, not a proof)")}
    out["network"] = network_summary(cfg, engine, hist)
    return out


def per_sample_path(forward) -> str | None:
    """Which exact path privacy/dpsgd.py took to the clipped sums (None: no private step ran)."""
    from vecgossip.privacy.dpsgd import FACTORED
    took = FACTORED.get(getattr(forward, "paths", {}).get("batched", forward))
    return None if took is None else "factored" if took else "copies"


def network_summary(cfg, engine: RoundEngine, hist: RoundHistory) -> dict:
    """The pairwise network DP of the same noise (privacy/network.py: the observer's whole view as
    one linear Gaussian mechanism, composed over rounds): the worst and mean epsilon_{u->v} over
    pairs u != v, beside the local DP without subsampling amplification. Reported only where the
    bound's assumptions hold (a gossip algorithm that mixes linearly, one private local step per
    round, a fixed W, every client noising every round, messages as sent, no Byzantine client);
    otherwise ``reported`` is false and ``why`` says which does not."""
    from vecgossip.privacy.network import network_epsilons
    mix = engine.mixing
    why = next((w for bad, w in (
        (not engine.algorithm.gossips_linearly, f"method={cfg.method_name} does not gossip x <- W^Q y"),
        (mix is None, "a server averages: no graph"),
        (mix is not None and mix.graphs is not None, "the graph is redrawn every round (the bound takes a fixed W)"),
        (engine.privacy.cfg.noise_multiplier == 0, "no noise (privacy.noise_multiplier=0)"),
        (int(engine.steps.max()) != 1, "more than one private local step a round"),
        (cfg.engine.participation < 1, "not every client noises every round (engine.participation < 1)"),
        (engine.faults is not None, "faults drop messages"),
        (engine.adversary is not None, "Byzantine clients do not send W's mixture"),
    ) if bad), None)
    if why is not None:
        return {"reported": False, "why": why}
    w = mix.at(0)[2].toarray().astype(np.float64)
    rounds = int(engine.privacy.steps.max())
    eps, local, how = network_epsilons(w, cfg.gossip_steps, float(engine.privacy.cfg.noise_multiplier), rounds,
                                       cfg.privacy.delta)
    off = eps[~np.eye(len(eps), dtype=bool)]
    return {"reported": True, "gossip_steps": cfg.gossip_steps, "rounds": rounds,
            "epsilon_pair_max": float(off.max()), "epsilon_pair_mean": float(off.mean()),
            "epsilon_local_unamplified": local, "bound": how,
            "neighbouring": "one example of one client added or removed; the observer sees its neighbours' "
                            "messages and its own model at every gossip step"}


def write_outputs(out: Path, run, hist: RoundHistory, summary: dict) -> None:
    """metrics.csv, accuracy.npy, rounds.npy, the plots, and summary.json last."""
    df = pd.DataFrame(hist.rows)
    write_csv(df, out / "metrics.csv")
    write_npy(np.stack(hist.acc).astype(np.float32), out / "accuracy.npy")
    write_npy(df["round"].to_numpy(), out / "rounds.npy")
    title = (f"{summary['method']} on {summary['topology']}: {summary['n_clients']} clients, "
             f"{summary['data']}, {summary['model']}")
    summary["plot_errors"] = plots(out, {"accuracy.png, consensus.png": lambda: plot_rounds(df, out, title)})
    write_json(summary, out / "summary.json")  # last: its presence marks a complete run
