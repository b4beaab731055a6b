"""The composition root: validate a config, build the engine its method selects, run it, write its
outputs. ``run(cfg, out_dir)`` is what the entry point and the tests call. Every option is
validated, and the data set's files are found, before any data is loaded or memory allocated.

Each engine's setup lives in ``vecgossip/composition/`` (``engine.name`` = tick | rounds, chosen by the method)."""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import torch
from omegaconf import DictConfig, OmegaConf

from vecgossip._version import __version__
from vecgossip.runtime import allocator, checkpoint, memory, replicas, shard, tracking
from vecgossip.network import mixing
from vecgossip.config import schema
from vecgossip.core.errors import ConfigError
from vecgossip.config.checks import pick_device
from vecgossip.core.options import get_choice, get_int
from vecgossip.data.registry import REGISTRY, ensure
from vecgossip.models.execution import EXECS
from vecgossip.models import IMPLS, MODELS, NORMS, check_precision
from vecgossip.models.saved import save_models
from vecgossip.core.files import write_csv
from vecgossip.composition import rounds as rounds_setup
from vecgossip.composition import tick as tick_setup
from vecgossip.core.state import INIT_SCHEMES
from vecgossip.network.topology import node_count

SETUPS = {"tick": tick_setup, "rounds": rounds_setup}


class DivergedRun(RuntimeError):
    """on_divergence=stop ended the run: outputs are written; the last checkpoint (finite) kept."""


class Interrupted(RuntimeError):
    """SIGINT/SIGTERM: the state was checkpointed at ``pos``; ``resume=true`` continues."""

    def __init__(self, pos: int, path: Path) -> None:
        super().__init__(f"interrupted at {pos}; the state is in {path}; run the same command again "
                         f"(resume=auto) or with resume={path} to continue")
        self.pos, self.path = pos, path


def outcome(s: dict) -> str:
    """One line per run: reach ticks (tick engine) or final accuracies (round engine); a replica
    batch: one line per replica."""
    if s.get("replicas", 1) > 1:
        return "\n".join(f"replica {i} (seed {sm['config']['seed']}): {outcome(sm)}"
                         for i, sm in enumerate(s["replica_summaries"]))
    if s.get("engine") == "rounds":
        f = s["final"]
        return (f"{s['name']} ({s['method']}, {s['topology']}, {s['n_clients']} clients): "
                f"local acc {f['acc_mean']:.4f} x_bar {f['xbar_acc']:.4f} consensus {f['consensus_distance']:.3g} "
                f"rounds={s['rounds_run']}")
    return (f"{s['name']}: first_reach={s['first_reach_tick']} most_reach={s['most_reach_tick']} "
            f"plateau_delay={s['plateau_delay_tick']} ticks={s['ticks_run']}")


def cli_overrides() -> list[str]:
    """The command line's overrides when running under Hydra, else none."""
    try:
        from hydra.core.hydra_config import HydraConfig
        return list(HydraConfig.get().overrides.task)
    except Exception:  # noqa: BLE001 - not under Hydra (tests, library use)
        return []


AVERAGING_KNOBS = {"beta": "averaging.beta", "R": "averaging.R", "correction": "averaging.correction",
                   "compression": "averaging.compression", "tl": "engine.tl.enabled"}


def check_overrides(cfg: DictConfig, overrides: list[str]) -> None:
    """Knobs given on the command line that the chosen parts would silently ignore."""
    given = {o.split("=", 1)[0].lstrip("+~") for o in overrides if "=" in o}
    if "degree" in given and cfg.topology.name not in ("regular", "random", "random_out"):
        raise ConfigError(f"degree has no effect with topology={cfg.topology.name}: only topology=regular, random "
                          "and random_out take a degree")
    # the averaging knobs are hyperparameters of the algorithms that interpolate them (gossip, fedavg_tick)
    raw = OmegaConf.to_container(cfg.algorithm, resolve=False) if OmegaConf.select(cfg, "algorithm") else {}
    refs = " ".join(str(v) for v in raw.values())
    for knob, key in AVERAGING_KNOBS.items():
        if (knob in given or key in given) and "${" + key + "}" not in refs and "${" + knob + "}" not in refs:
            reads = ", ".join(f"algorithm.{k}" for k in raw if k != "_target_")
            raise ConfigError(f"{knob if knob in given else key} has no effect with algorithm "
                              f"{raw.get('_target_')} (method={cfg.get('method_name')}): "
                              + (f"its hyperparameters are {reads}" if reads else "it takes no hyperparameters"))
    tick_only = [k for k in ("data.sampler", "data.eval_set", "data.local_eval_size") if k in given]
    if tick_only and OmegaConf.select(cfg, "engine.name") == "rounds":
        raise ConfigError(f"{tick_only[0]} has no effect on the round engine (method={cfg.get('method_name')}): "
                          "its clients own fixed partitions (partition=...) and local test sets "
                          "(data.local_test_size)")


def validate(cfg: DictConfig, overrides: list[str] | None = None) -> None:
    """Fail fast, before any work, on every option the run depends on (``overrides``: the command
    line's, to catch knobs the chosen parts ignore; by default read from Hydra)."""
    import_plugins(cfg)
    check_overrides(cfg, cli_overrides() if overrides is None else overrides)
    get_choice(cfg, "engine.name", SETUPS)
    replicas.check(cfg, cfg.engine.name, world(cfg))
    for one in replicas.expand(cfg):          # replicas=S: every replica's config (seed + s, its values)
        _validate_one(one)
    check_memory(cfg)


def import_plugins(cfg: DictConfig) -> None:
    """``plugins=[mypkg, ...]``: import the user's modules first, so that what they register
    (vecgossip.register_dataset, ...) exists before anything is checked; one line if one cannot be
    imported."""
    import importlib
    mods = OmegaConf.select(cfg, "plugins", default=[]) or []
    if isinstance(mods, str) or not all(isinstance(m, str) for m in mods):
        raise ConfigError(f"plugins must be a list of module names, e.g. plugins=[mypkg], got {mods!r}")
    for mod in mods:
        try:
            importlib.import_module(mod)
        except Exception as err:   # noqa: BLE001 - whatever the user's module raised
            raise ConfigError(f"plugins: {mod} cannot be imported: {type(err).__name__}: {err}") from None


def _validate_one(cfg: DictConfig) -> None:
    schema.check(cfg)                 # unknown keys and wrong types, from wherever they came
    pick_device(cfg.device)           # an unknown device, or a CUDA index that is not there
    get_int(cfg, "seed", 0)
    get_choice(cfg, "model.name", MODELS)
    get_choice(cfg, "model.impl", IMPLS)
    get_choice(cfg, "model.exec", EXECS)
    try:
        check_precision(cfg.model.name, cfg.model.impl, OmegaConf.select(cfg, "precision", default="fp32"))
    except ValueError as err:
        raise ConfigError(str(err)) from None
    get_choice(cfg, "model.init", INIT_SCHEMES)
    norm = OmegaConf.select(cfg, "model.norm")
    if norm is not None and norm not in NORMS:
        raise ConfigError(f"model.norm={norm!r} is not available; allowed: {', '.join(NORMS)}")
    get_choice(cfg, "data.name", REGISTRY)
    resume = OmegaConf.select(cfg, "resume", default="auto")
    if resume is not None and not isinstance(resume, (bool, str)):
        raise ConfigError(f"resume must be auto, true, false or a checkpoint path, got {resume!r}")
    if OmegaConf.select(cfg, "checkpoint_every") is not None:
        get_int(cfg, "checkpoint_every", 1)
    secs = OmegaConf.select(cfg, "checkpoint_seconds")
    if secs is not None and (isinstance(secs, bool) or not isinstance(secs, (int, float)) or secs <= 0):
        raise ConfigError(f"checkpoint_seconds must be a number > 0 or null (off), got {secs!r}")
    tracking.validate(cfg)
    SETUPS[cfg.engine.name].validate(cfg)
    check_distributed(cfg)


def world(cfg: DictConfig) -> int:
    """Processes the run's nodes are sharded over: torchrun's WORLD_SIZE unless distributed.enabled=false."""
    enabled = OmegaConf.select(cfg, "distributed.enabled", default="auto")
    return 1 if enabled is False or enabled == "false" else shard.world_from_env()[1]


def nodes(cfg: DictConfig) -> int:
    """The simulation's nodes: the tick engine's graph (a star adds its hub), the round engine's clients."""
    n = int(cfg.topology.n)
    return node_count(cfg.topology.name, n) if cfg.engine.name == "tick" else n


def check_distributed(cfg: DictConfig) -> None:
    """The distributed.* options, and what a sharded run (shard.py) supports so far."""
    enabled = OmegaConf.select(cfg, "distributed.enabled", default="auto")
    if enabled not in ("auto", True, False):
        raise ConfigError(f"distributed.enabled must be auto, true or false, got {enabled!r}")
    get_choice(cfg, "distributed.backend", shard.BACKENDS)
    get_choice(cfg, "distributed.exchange", shard.EXCHANGES)
    g = world(cfg)
    if enabled is True and g == 1:
        raise ConfigError("distributed.enabled=true needs several processes: launch with "
                          "torchrun --nproc-per-node=G -m vecgossip ...")
    if g == 1:
        return
    tick = cfg.engine.name == "tick"
    if (tick and cfg.model.broadcast_init) or fault_config_active(cfg):
        raise ConfigError("a sharded run (torchrun) does not take model.broadcast_init or faults.* so far: "
                          "run those in one process")
    if g > nodes(cfg):
        raise ConfigError(f"{g} processes for nodes={cfg.topology.n}: every process needs at least one node")
    if cfg.distributed.backend == "nccl" and pick_device(cfg.device).type != "cuda":
        raise ConfigError("distributed.backend=nccl needs device=cuda; CPU ranks use gloo")


def fault_config_active(cfg: DictConfig) -> bool:
    return tick_setup.fault_config(cfg).active


def check_memory(cfg: DictConfig) -> None:
    """Refuse, with the numbers, a run the device cannot hold (memory.py); sharded over GPUs, per
    GPU (ranks on one CPU host share its memory)."""
    device = pick_device(cfg.device)
    need, how = memory.estimate(cfg, world(cfg) if device.type == "cuda" else 1, replicas.count(cfg))
    have = memory.available(device)
    if have is not None and need > have:
        raise ConfigError(f"the run needs about {need / 2**30:.1f} GiB ({how}) but {have / 2**30:.1f} GiB is "
                          f"available on {device}: use fewer nodes/clients, a smaller model or a larger device")


def check_data(cfg: DictConfig) -> None:
    """The data set's files are where data.root says, or are downloaded now (data.download): a
    one-line error naming data.root and the download's first reason if not."""
    try:
        ensure(cfg.data.name, cfg.data.root, bool(cfg.data.download))
    except FileNotFoundError as err:
        raise ConfigError(str(err)) from None


def periodic_flush(out: Path, every_s: float = 60.0):
    """on_eval callback: rewrite metrics.csv (atomically) at most every ``every_s`` seconds, so a
    long run shows partial results; summary.json still marks completion."""
    last = time.monotonic()

    def flush(hist) -> None:
        nonlocal last
        if time.monotonic() - last > every_s:
            write_csv(pd.DataFrame(hist.rows), out / "metrics.csv")
            last = time.monotonic()
    return flush


def run(cfg: DictConfig, out_dir: str | Path | None = None) -> dict:
    """Validate, build, simulate and (if ``out_dir``) write outputs. Returns the summary.

    With ``out_dir``: a run whose summary.json is there already is not run again (resume=auto or
    true); one with a checkpoint there continues from it; checkpoints are written every
    ``checkpoint_every`` ticks/rounds and ``checkpoint_seconds`` of wall time, and on SIGINT/SIGTERM
    (then :class:`Interrupted` is raised); the checkpoint is removed once the outputs are written."""
    validate(cfg)
    rank, size, _ = shard.start(OmegaConf.select(cfg, "distributed.enabled", default="auto"),
                                OmegaConf.select(cfg, "distributed.backend", default="auto"), pick_device(cfg.device))
    sh = shard.Shard(nodes(cfg), rank, size, OmegaConf.select(cfg, "distributed.exchange", default="all_to_all"))
    return _run_sharded(cfg, out_dir, sh)


def _run_sharded(cfg: DictConfig, out_dir: str | Path | None, sh: shard.Shard) -> dict:
    """:func:`run` after validation, on every rank: rank 0's run directory is every rank's (a shared
    file system across hosts), its checkpoints one file per rank, and rank 0 alone writes outputs."""
    if sh.sharded:
        out_dir = sh.broadcast(None if out_dir is None else str(out_dir))
    out = None if out_dir is None else Path(out_dir)
    if out is not None and (out / "summary.json").exists() and OmegaConf.select(cfg, "resume", default="auto") \
            in ("auto", True, "true"):
        summary = json.loads((out / "summary.json").read_text())
        summary["_skipped"] = True
        return summary
    name = checkpoint.file_name(sh.rank, sh.world)
    ckpt = checkpoint.find(cfg, out, name)
    if sh.sum_int(ckpt is not None) not in (0, sh.world):
        raise ConfigError(f"resume: only some of the {sh.world} ranks' checkpoints are in {out}; "
                          "resume=false starts afresh")
    blob = None if ckpt is None else checkpoint.load_resume(cfg, ckpt)
    if blob is not None and sh.sum_int(blob["pos"]) != blob["pos"] * sh.world:
        raise ConfigError(f"resume: the {sh.world} ranks' checkpoints in {out} are from different positions "
                          "(a kill while they were written); resume=false starts afresh")
    check_data(cfg)
    setup = SETUPS[cfg.engine.name]
    if pick_device(cfg.device).type == "cpu":
        allocator.configure(cfg.engine.malloc)
    torch.manual_seed(int(cfg.seed))
    allocator.release()                      # a sweep's earlier jobs in this process: not in this one's peak
    memory.reset_peak(pick_device(cfg.device))
    with deterministic(bool(cfg.get("deterministic", False))):
        return _run(cfg, out, setup, blob, sh, name)


@contextmanager
def deterministic(on: bool):
    """deterministic=true: torch's deterministic algorithms (cuBLAS with a fixed workspace) and the
    atomic-free sparse products of mixing.py, for the run only."""
    if not on:
        yield
        return
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    mixing.set_deterministic(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)
        mixing.set_deterministic(False)


def _summary(cfg: DictConfig, setup, hist, engine) -> dict:
    """The engine's summary of one run, with its config, versions, threads and memory (the peak
    measured since the run started beside memory.estimate's figure)."""
    summary = setup.summarize(cfg, hist, engine)
    device = pick_device(cfg.device)
    summary["memory"] = {"peak_bytes": memory.peak(device), "estimate_bytes": memory.estimate(cfg)[0],
                         "peak_of": "CUDA allocations" if device.type == "cuda" else "process resident set"}
    summary.update({"config": OmegaConf.to_container(cfg, resolve=True),
                    "versions": {"vecgossip": __version__, "torch": torch.__version__,
                                 "python": platform.python_version()},
                    "threads": torch.get_num_threads()})
    return summary


def _save_models(out: Path, cfg: DictConfig, engine, theta: torch.Tensor) -> None:
    data = engine.train_data
    save_models(out / "models.pt", cfg.model.name, data.shape, data.num_classes, theta,
                OmegaConf.select(cfg, "model.norm"))


def _replica_outputs(cfg: DictConfig, cfgs: list[DictConfig], hist, engine, setup, writer: Path | None) -> dict:
    """replicas=S: each replica's summary and outputs in ``replica{s}/`` (a separate run's files),
    then the top level's metrics.csv (``replica`` column) and aggregate summary.json."""
    summaries = [_summary(c, setup, h, e) for c, h, e in zip(cfgs, hist.parts, engine.engines)]
    top = replicas.aggregate(cfg, summaries, hist.wall_seconds)
    if writer is not None:
        for s, (c, h, e, sm) in enumerate(zip(cfgs, hist.parts, engine.engines, summaries)):
            if c.get("save_models", False):
                _save_models(writer / f"replica{s}", c, e, e.state.theta.clone())   # not the whole stack
            setup.write_outputs(writer / f"replica{s}", c, h, sm)
        replicas.write_outputs(writer, hist.rows, top)
    top["replica_summaries"] = summaries
    return top


def _run(cfg: DictConfig, out: Path | None, setup, blob: dict | None, sh: shard.Shard,
         name: str = checkpoint.FILE) -> dict:
    """Build, simulate (from the checkpoint ``blob`` when resuming), summarise, write (rank 0)."""
    cfgs = replicas.expand(cfg)
    try:
        engine = setup.build_engine(cfg, shard=sh) if len(cfgs) == 1 else setup.build_replicas(cfgs)
    except FileNotFoundError as err:   # data that was to be downloaded did not come: where to put it
        raise ConfigError(str(err)) from None
    writer = out if sh.rank == 0 else None     # where outputs go: rank 0's run directory
    checkpointer = None
    if out is not None and (cfg.get("checkpoint_every") is not None or cfg.get("checkpoint_seconds") is not None):
        checkpointer = checkpoint.Checkpointer(out, cfg.get("checkpoint_every"), cfg.get("checkpoint_seconds"),
                                               {"fingerprint": checkpoint.fingerprint(cfg)},
                                               start=0 if blob is None else blob["pos"], name=name,
                                               agree=sh.any if sh.sharded else None)
    tracker = tracking.make(cfg, writer, resumed=blob is not None)
    with checkpoint.on_signals(checkpointer):   # also while writing: a signal then lets the outputs finish
        hist = engine.run(progress=bool(cfg.get("progress", True)),
                          on_eval=tracking.chain(None if writer is None else periodic_flush(writer), tracker),
                          checkpointer=checkpointer, resume=None if blob is None else blob["engine"])
        if tracker is not None:
            tracker.close(hist)
        if hist.interrupted:
            if writer is not None:
                write_csv(pd.DataFrame(hist.rows), writer / "metrics.csv")
            raise Interrupted(checkpointer.last_pos, checkpointer.path if not sh.sharded else checkpointer.path.parent)
        if len(cfgs) > 1:
            summary = _replica_outputs(cfg, cfgs, hist, engine, setup, writer)
        else:
            summary = _summary(cfg, setup, hist, engine)
            if sh.sharded:
                summary["shards"] = {"processes": sh.world, "exchange": sh.exchange,
                                     "model_bytes_received_rank0": sh.broadcast(sh.bytes_in)}
            models = None
            if out is not None and cfg.get("save_models", False):
                models = sh.gather_rows(engine.state.theta, sh.sizes, models=False)   # all rows, on every rank
            if writer is not None:
                if models is not None:
                    _save_models(writer, cfg, engine, models)
                setup.write_outputs(writer, cfg, hist, summary)
        sh.sum_int(0)                              # sharded: every rank past the outputs (a barrier)
        if out is not None and hist.diverged is None:
            (out / name).unlink(missing_ok=True)   # the run is complete: summary.json marks it
    if checkpointer is not None and checkpointer.requested and not hist.interrupted:
        print("vecgossip: a stop signal came while the outputs were written; they are complete", file=sys.stderr)
    summary["_history"] = hist
    if hist.diverged is not None:
        kept = out / name if out is not None and (out / name).exists() else None
        raise DivergedRun(hist.diverged["message"] + "; outputs written"
                          + (f"; last checkpoint (all nodes finite): {kept}" if kept else ""))
    return summary
