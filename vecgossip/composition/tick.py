"""Building the tick engine (paper 1) from a validated run, and its summary and output files."""
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
from vecgossip.core.metrics import first_reach_tick, most_reach_tick, plateau_delay_tick
from vecgossip.core.state import new_state
from vecgossip.data.dataset import eval_indices
from vecgossip.data.partition import Partition, dirichlet as dirichlet_partition, iid as iid_partition, local_test_sets
from vecgossip.data.sampling import Shards, dirichlet_label_probs, prior_mix_probs
from vecgossip.engines.clock.config import seconds as clock_seconds
from vecgossip.engines.group import Group
from vecgossip.engines.tick.engine import TickData, TickEngine
from vecgossip.engines.tick.measures import EvalSet
from vecgossip.engines.tick.state import History
from vecgossip.models.chunks import resolve_chunk
from vecgossip.models.execution import train_chunk as exec_chunk
from vecgossip.network.peers import Links
from vecgossip.network.topology import build
from vecgossip.privacy.private import PrivateTraining
from vecgossip.runtime.device import pick_device
from vecgossip.runtime.outputs import plot_accuracy, plot_layers, plots
from vecgossip.runtime.shard import Shard


def build_engine(run, shard: Shard | None = None, data: tuple | None = None) -> TickEngine:
    """The tick engine of a validated ``run`` (config/load.py): graph, initial state, data,
    samplers. ``data``: the (train, test) data sets already loaded (replicas share them)."""
    cfg, algo = run.cfg, run.algorithm
    device, seed = pick_device(cfg.device), cfg.seed
    graph = build(cfg.topology.name, cfg.topology.n, cfg.topology.k, seed=seed)
    n = graph.n
    train, test = data if data is not None else load_data(cfg, device)
    layout, forward = model_parts(cfg, train.shape, train.num_classes)
    theta = initial_models(cfg, layout, n, device, shard)
    if cfg.model.broadcast_init:   # Fig. 6: one averaged model given to every node before training
        theta[:] = theta.mean(0, keepdim=True)
    decision = choose_exec(cfg, forward, layout, theta, train, device, shard)
    np_rng = np.random.default_rng(seed)
    tick_data = node_data(cfg, n, train, test, np_rng, device)
    options = cfg.engine.replace(
        eval_chunk=resolve_chunk(cfg.engine.eval_chunk, device, int(tick_data.evals.y.numel()), cfg.model.name),
        train_chunk=exec_chunk(cfg.engine.train_chunk, decision,
                               resolve_chunk("auto", device, cfg.data.batch_size, cfg.model.name)))
    links = Links(graph, active=not algo.peer_rule)   # TL: every node starts with no peers
    return TickEngine(options, algo, new_state(layout, theta), links, forward, cfg.optim, tick_data,
                      torch.Generator(device=device).manual_seed(seed + 1), np_rng, faults=make_faults(cfg, n),
                      shard=shard, random=Streams.of(seed, device), execution=decision,
                      privacy=(PrivateTraining(cfg.privacy, seed, inclusion_rates(tick_data, n),
                                               planned=np.full(n, planned_steps(options)),
                                               smallest=smallest_pool(tick_data))
                               if cfg.privacy.active else None),
                      adversary=Adversary(cfg.adversary, n, seed, device) if cfg.adversary.active else None,
                      seconds=clock_seconds(cfg.clock, n, cfg.data.batch_size, seed) if cfg.clock.enabled else None)


def planned_steps(options) -> int:
    """The most training steps a node takes in max_ticks: tick 0, then every T_acq (the shortest)."""
    return (options.max_ticks - 1) // options.t_acq_range[0] + 1


def label_rates(d: TickData, n: int) -> np.ndarray | None:
    """(N, C) the chance that a given training image of label c is in node i's batch of B draws WITH
    replacement from the shared pool, 1 - (1 - p)^B, p its label's share of the node's mix over
    that label's image count; None under data.sampler=shards (each image is one node's)."""
    if d.shards is not None:
        return None
    counts = d.train.index.count.cpu().numpy().astype(np.float64)                     # (C,) images per label
    mix = (np.full((n, counts.size), 1.0 / counts.size) if d.label_probs is None
           else d.label_probs.cpu().numpy().astype(np.float64))
    return 1.0 - (1.0 - mix / counts[None, :]) ** d.batch_size


def inclusion_rates(d: TickData, n: int) -> np.ndarray:
    """(N,) the accountant's sampling rate of each node: the largest chance that a given training
    image is in the node's batch (:func:`label_rates`; 1 - (1 - 1 / shard size)^B under shards)."""
    if d.shards is not None:
        return 1.0 - (1.0 - 1.0 / d.shards.count.cpu().numpy().astype(np.float64)) ** d.batch_size
    return label_rates(d, n).max(1)


def smallest_pool(d: TickData) -> int:
    """The fewest training images a node draws from: its shard, or the shared pool."""
    return int(d.shards.count.min()) if d.shards is not None else int(d.train.index.count.sum())


def example_epsilon(engine: TickEngine) -> float:
    """The epsilon of one training image of the shared pool: every node that can draw it is a
    sampled Gaussian mechanism over it (rate: :func:`label_rates`, steps: its own), composed;
    the largest over the labels (an image of label c is in each node's batch at that label's
    rate). Under data.sampler=shards an image is one node's: that node's epsilon."""
    p, d = engine.privacy, engine.data
    rates = label_rates(d, engine.n)
    if rates is None:
        return float(p.epsilons().max())
    from vecgossip.privacy.accounting import composed_epsilon
    c = p.cfg
    worst = 0.0
    for label in range(rates.shape[1]):
        parts: dict[float, int] = {}
        for q, steps in zip(rates[:, label].tolist(), p.steps.tolist()):   # the same rate: one mechanism, steps added
            parts[q] = parts.get(q, 0) + int(steps)
        worst = max(worst, composed_epsilon(float(c.noise_multiplier), tuple(parts.items()), c.delta, c.accountant))
    return worst


def privacy_summary(cfg, engine: TickEngine) -> dict | None:
    """summary.json's ``privacy`` of a tick run: the options, each node's epsilon and one
    example's (composed over every node that can draw it), the bound applied."""
    from vecgossip.composition.rounds import per_sample_path
    p = engine.privacy
    if p is None:
        return None
    eps = p.epsilons()
    shared = engine.data.shards is None
    return {**p.cfg.model_dump(), "noise_multiplier_from": p.sigma_from,
            "epsilon": {"min": float(eps.min()), "mean": float(eps.mean()), "max": float(eps.max())},
            "epsilon_per_example": {"max": example_epsilon(engine),
                                    "relation": ("one image of the shared pool added or removed: every node that can "
                                                 "draw it composed" if shared else
                                                 "one image of one node's shard: that node's epsilon")},
            "steps": {"min": int(p.steps.min()), "max": int(p.steps.max())},
            "sampling_rate": {"min": float(p.rates.min()), "max": float(p.rates.max())},
            "per_sample": per_sample_path(engine.forward),
            "bound": p.cfg.accountant.upper() + " accountant: Poisson-subsampled Gaussian at q_i = 1 - (1 - p_i)^B, "
                     "the largest chance that one image is in node i's batch; the tick engine draws batches WITH "
                     "replacement, which neither Opacus nor dp-accounting accounts for (an image drawn twice in a "
                     "batch counts twice): the conventional approximation, not a proof"}


def node_data(cfg, n: int, train, test, np_rng: np.random.Generator, device: torch.device) -> TickData:
    """What each node trains on under ``data.sampler`` (data/sampling.py): (N, C) label mixes
    (None: IID), and for ``shards`` the disjoint shards (cut by partition.dirichlet, or evenly at
    random for IID, from their own stream (seed, 5)), whose label proportions are then the label
    mixes; and what each node is evaluated on (``data.eval_set``)."""
    if train.groups is not None:
        return text_node_data(cfg, train, test, device)
    probs, shards = label_mixes(cfg, n, train, np_rng, device)
    d = cfg.data
    x, y = test.batch(eval_indices(test.labels, "fixed100" if d.eval_set == "local" else d.eval_set))
    idx = None
    if d.eval_set == "local":        # each node's own test images, drawn like its training data
        shares = probs.cpu().numpy().astype(np.float64) if probs is not None else np.ones((n, train.num_classes))
        idx = torch.from_numpy(local_test_sets(test.labels.cpu().numpy(), shares, d.local_eval_size,
                                               np.random.default_rng([cfg.seed, 6]))).to(device)
    return TickData(train, EvalSet(x, y, test, idx), d.batch_size, probs, shards)


def text_node_data(cfg, train, test, device: torch.device) -> TickData:
    """Text data: node i draws its batches with replacement from the training windows its data
    set gives it (``train.groups``, as shards), and is evaluated on all its own test windows
    (``data.eval_set=local``, ragged) or on every test window (``full``)."""
    shards = Shards.of(np.arange(int(train.groups[-1]), dtype=np.int64), np.asarray(train.groups), device)
    if cfg.data.eval_set == "local":
        own = Partition(np.arange(int(test.groups[-1]), dtype=np.int64), np.asarray(test.groups, dtype=np.int64))
        x, y = test.batch(torch.arange(1, device=device))
        return TickData(train, EvalSet(x, y, test, own.padded(device), own.sizes), cfg.data.batch_size, None, shards)
    x, y = test.batch(torch.arange(test.labels.numel(), device=device))
    return TickData(train, EvalSet(x, y, test), cfg.data.batch_size, None, shards)


def label_mixes(cfg, n: int, train, np_rng: np.random.Generator,
                device: torch.device) -> tuple[torch.Tensor | None, Shards | None]:
    """(N, C) label mixes (None: IID) and the disjoint shards of ``data.sampler=shards``."""
    alpha, kind = cfg.data.alpha, cfg.data.sampler
    if kind == "shards":
        labels = train.labels.cpu().numpy()
        rng = np.random.default_rng([cfg.seed, 5])
        part = (iid_partition(labels.size, n, rng) if alpha is None
                else dirichlet_partition(labels, n, float(alpha), rng, min_samples=1))
        mix = part.label_counts(labels, train.num_classes) / part.sizes[:, None]          # (N, C)
        return torch.from_numpy(mix).to(device, torch.float32), Shards.of(part.members, part.offsets, device)
    make = prior_mix_probs if kind == "prior_mix" else dirichlet_label_probs
    probs = make(n, alpha, np_rng, train.num_classes)
    return (None if probs is None else probs.to(device)), None


def build_replicas(runs: list, data: tuple | None = None) -> Group:
    """``replicas=S``: the replica runs' engines over one stacked state (engines/group.py)."""
    return stack_replicas(runs, build_engine, data)


def summarize(run, hist: History, engine: TickEngine) -> dict:
    """summary.json of a tick-engine run (the reach ticks of Table I, ...)."""
    cfg = run.cfg
    ticks = np.array([r["tick"] for r in hist.rows])
    acc = np.stack(hist.acc)
    thr, frac = cfg.engine.threshold, cfg.engine.most_frac
    out = {
        "engine": "tick",
        "name": cfg.name,
        "n_nodes": engine.n,
        "n_reported": int(acc.shape[1]),
        "data": engine.train_data.source,
        "threshold": thr,
        "method": cfg.method_name,
        "algorithm": engine.algorithm.name(),
        "method_params": engine.algorithm.hyperparameters(),
        "first_reach_tick": first_reach_tick(ticks, acc, thr),
        "most_reach_tick": most_reach_tick(ticks, acc, thr, frac),
        "plateau_delay_tick": plateau_delay_tick(ticks, acc.mean(1), hist.t_first_average),
        "first_average_tick": hist.t_first_average,
        "ticks_run": hist.ticks_run,
        "stopped_early": hist.stopped_early,
        "stopped": hist.stopped,                       # privacy.target_epsilon reached
        "privacy": privacy_summary(cfg, engine),
        "diverged": hist.diverged,                     # on_divergence=stop: where and which nodes
        "nodes_diverged": int(engine.diverged.sum()),  # isolated (on_divergence=isolate)
        "messages": None if engine.faults is None else {"sent": engine.faults.sent, "lost": engine.faults.lost},
        "clock": clock_summary(engine, hist),
        "wall_seconds": round(hist.wall_seconds, 3),
        "ticks_per_second": round(hist.ticks_run / max(hist.wall_seconds, 1e-9), 3),
        "final_acc_mean": float(acc[-1].mean()),
        "final_acc_min": float(acc[-1].min()),        # the worst reported node's (the honest ones' under attack)
        "initial_layer_variance": hist.initial_variance,   # before any training or averaging
        "execution": engine.execution.as_dict(),          # model.exec: the paths taken, how, timings
        "cuda_graphs": getattr(engine, "graphs_note", None),   # engine.cuda_graphs: captured, or why not
        "adversary": None if engine.adversary is None else {   # the metrics are the honest nodes'
            "attack": cfg.adversary.attack, "byzantine": np.flatnonzero(engine.adversary.byzantine).tolist()},
    }
    if hist.rows and "acc_chars" in hist.rows[-1]:      # text: accuracy over all test characters
        out["final_acc_chars"] = float(hist.rows[-1]["acc_chars"])
    return out


def clock_summary(engine: TickEngine, hist: History) -> dict | None:
    """summary.json's ``clock`` (clock.enabled): virtual seconds run, per node steps' compute,
    bytes sent, messages received and their mean staleness (arrival - send), and the virtual
    seconds at which the mean accuracy first reached 50-90%."""
    sec = engine.seconds
    if sec is None:
        return None
    tr, nodes = engine.transport, clock_nodes(engine, hist)          # the per-node figures, summarised
    stale = nodes.staleness_mean.to_numpy()
    hit = {f"{p}%": next((r["seconds"] for r in hist.rows if r["acc_mean"] >= p / 100), None)
           for p in (50, 60, 70, 80, 90)}
    return {"virtual_seconds": hist.ticks_run * sec.resolution, "resolution": sec.resolution,
            "step_seconds": {"min": float(sec.step_seconds.min()), "mean": float(sec.step_seconds.mean()),
                             "max": float(sec.step_seconds.max())},
            "busy_mean": float(nodes.busy_seconds.to_numpy().mean()),
            "bytes_sent_mean": float(tr.bytes_sent.mean()), "messages_received_mean": float(tr.received.mean()),
            "in_flight": int(tr.flow.sender.size), "messages_aborted": tr.aborted, "messages_flushed": tr.dropped,
            "steps_skipped_mean": float(engine.schedule.skipped.mean()),
            "staleness_mean": float(np.nanmean(stale)) if np.isfinite(stale).any() else None,
            "staleness_max_node": float(np.nanmax(stale)) if np.isfinite(stale).any() else None,
            "seconds_to_acc_mean": hit}


def clock_nodes(engine: TickEngine, hist: History) -> pd.DataFrame | None:
    """clock_nodes.csv (clock.enabled): per node, what the clock drew (seconds a step, up- and
    downlink Mbit/s; inf: no limit) and what it measured (seconds computing and not, bytes sent,
    messages received and their mean staleness, arrival - send; empty: none received)."""
    sec = engine.seconds
    if sec is None:
        return None
    tr, sched = engine.transport, engine.schedule
    busy = np.maximum(sched.steps - sched.skipped - 1, 0) * sec.step_seconds
    stale = np.divide(tr.staleness, tr.received, out=np.full(tr.received.size, np.nan), where=tr.received > 0)
    return pd.DataFrame({"node": np.arange(sec.step_seconds.size), "step_seconds": sec.step_seconds,
                         "uplink_mbps": sec.uplink * 8 / 1e6, "downlink_mbps": sec.downlink * 8 / 1e6,
                         "busy_seconds": busy, "idle_seconds": hist.ticks_run * sec.resolution - busy,
                         "bytes_sent": tr.bytes_sent, "messages_received": tr.received, "staleness_mean": stale})


def write_outputs(out: Path, run, hist: History, summary: dict) -> None:
    """metrics.csv, accuracy.npy, ticks.npy, the plots, and summary.json last."""
    df = pd.DataFrame(hist.rows)
    write_csv(df, out / "metrics.csv")
    write_npy(np.stack(hist.acc).astype(np.float32), out / "accuracy.npy")
    write_npy(df.tick.to_numpy(), out / "ticks.npy")
    params = ", ".join(f"{k}={v}" for k, v in (summary.get("method_params") or {}).items())
    named = summary["method"] + (f" ({summary['name']})" if summary["name"] != summary["method"] else "")
    title = (f"{named}: N={summary['n_nodes']}, {summary['data']}"
             + (f", {params}" if params else ""))
    summary["plot_errors"] = plots(out, {
        "accuracy.png": lambda: plot_accuracy(df, summary, out / "accuracy.png", title),
        "variance.png": lambda: plot_layers(df, "var_", "mean weight variance (dot: at initialisation)",
                                            out / "variance.png", title, summary["initial_layer_variance"]),
        "weight_difference.png": lambda: plot_layers(df, "wdiff_", "weight difference", out / "weight_difference.png",
                                                     title)})
    write_json(summary, out / "summary.json")  # last: its presence marks a complete run
