"""The composition root: a composed config validated at the one boundary (:mod:`vecgossip.config.load`),
the engine its method selects built from the typed result, run, its outputs written. ``run(cfg,
out_dir)`` is what the entry point, the Python API and the tests call. Every option is validated,
and the data set's files are found, before any data is loaded or memory allocated.

Each engine's builder is a module here (:mod:`.tick`, :mod:`.rounds`), picked by ``engine.name``
(chosen by the method); adding an engine adds a module, not branches."""
from __future__ import annotations

import json
import logging
import os
import platform
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from omegaconf import DictConfig, OmegaConf

from vecgossip._version import __version__
from vecgossip.composition import rounds as rounds_setup, tick as tick_setup
from vecgossip.config.knobs import consumed
from vecgossip.config import rules
from vecgossip.config.load import Plan, load
from vecgossip.config.schema import KNOBS
from vecgossip.core.errors import ConfigError, DivergedRun  # noqa: F401  (DivergedRun: raised here)
from vecgossip.core.files import write_csv, write_npy
from vecgossip.data.registry import ensure
from vecgossip.models.saved import save_models
from vecgossip.network import mixing
from vecgossip.runtime import allocator, checkpoint, memory, replicas, shard, tracking
from vecgossip.runtime.device import pick_device
from vecgossip.runtime.precision import float32_math

LOG = logging.getLogger("vecgossip")

SETUPS = {"tick": tick_setup, "rounds": rounds_setup}


class Interrupted(SystemExit):
    """SIGINT/SIGTERM: the state was checkpointed at ``pos``; ``resume=true`` continues. A
    ``SystemExit`` (as the signal asked the process to end): a script that does not catch it ends
    with its one-line message and no traceback; ``except Exception`` does not swallow it."""

    def __init__(self, pos: int, path: Path) -> None:
        folder = path if path.is_dir() else path.parent
        super().__init__(f"vecgossip: interrupted at {pos}; the state is in {path}; to continue, run it again in "
                         f"the same folder: vecgossip.run(..., run_dir='{folder}') (resume=auto)")
        self.pos, self.path = pos, path

    def __str__(self) -> str:
        return str(self.code)


def outcome(s: dict) -> str:
    """One line per run: reach ticks (tick engine) or final accuracies (round engine); a replica
    batch: one line per replica."""
    if s.get("replicas", 1) > 1:
        return "\n".join(f"replica {i} (seed {sm['config']['seed']}): {outcome(sm)}"
                         for i, sm in enumerate(s["replica_summaries"]))
    if s.get("engine") == "rounds":
        f, adv = s["final"], s.get("adversary")
        honest = "" if not adv else f", {len(adv['byzantine'])} Byzantine ({adv['attack']}); honest"
        return (f"{s['name']} ({s['method']}, {s['topology']}, {s['n_clients']} clients{honest}): "
                f"local acc {f['acc_mean']:.4f} worst {f['acc_min']:.4f} x_bar {f['xbar_acc']:.4f} consensus {f['consensus_distance']:.3g} "
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


def validate(cfg: DictConfig, overrides: list[str] | None = None) -> Plan:
    """Fail fast, before any work, on every option the run depends on (``overrides``: the command
    line's, to refuse knobs the chosen parts ignore; by default read from Hydra): the typed
    :class:`~vecgossip.config.load.Plan`, or :class:`ConfigError` with one line."""
    return load(cfg, cli_overrides() if overrides is None else overrides, world(cfg))


def world(cfg: DictConfig) -> int:
    """Processes the run's nodes are sharded over: torchrun's WORLD_SIZE unless distributed.enabled=false."""
    enabled = OmegaConf.select(cfg, "distributed.enabled", default="auto")
    return 1 if enabled is False or enabled == "false" else shard.world_from_env()[1]


def check_data(cfg) -> None:
    """The data set's files are where data.root says, or are downloaded now (data.download): a
    one-line error naming data.root and the download's first reason if not. ``cfg``: typed."""
    try:
        ensure(cfg.data.name, cfg.data.root, cfg.data.download)
    except FileNotFoundError as err:
        raise ConfigError(str(err)) from None


def periodic_flush(out: Path, every_s: float = 60.0):
    """on_eval callback: rewrite metrics.csv (atomically) at most every ``every_s`` seconds, so a
    long run shows partial results; summary.json still marks completion."""
    import time
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
    plan = validate(cfg)
    first = plan.first.cfg
    rank, size, _ = shard.start(first.distributed.enabled, first.distributed.backend, pick_device(first.device))
    nodes = first.topology.nodes if first.engine.name == "tick" else first.topology.n
    sh = shard.Shard(nodes, rank, size, first.distributed.exchange)
    return run_plan(plan, out_dir, sh)


def sweep_job() -> str:
    """"sweep DIR, job K (i of n): " under Hydra's multirun (K: the job's number, its subfolder by
    default; n from the sweep's parameters, left out where they cannot be counted), else ""."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode
        hc = HydraConfig.get()
        if hc.mode != RunMode.MULTIRUN:
            return ""
        n = sweep_size(hc)
        return f"sweep {hc.sweep.dir}, job {hc.job.num}{f' ({hc.job.num + 1} of {n})' if n else ''}: "
    except Exception:  # noqa: BLE001 - not under Hydra (the Python API)
        return ""


def sweep_size(hc) -> int | None:
    """How many jobs Hydra's basic sweeper makes of this sweep: its command line's overrides and the
    preset's ``hydra.sweeper.params``, expanded as the sweeper does (None for another sweeper)."""
    try:
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
        from hydra.core.override_parser.overrides_parser import OverridesParser
        if "BasicSweeper" not in str(hc.sweeper.get("_target_", "")):
            return None
        args = [a for a in sys.argv[1:] if "=" in a and not a.startswith(("-", "hydra.", "+hydra."))]
        typed = {a.split("=", 1)[0].lstrip("+~") for a in args}       # the command line wins over the preset
        params = [f"{k}={v}" for k, v in (hc.sweeper.get("params") or {}).items() if k.lstrip("+~") not in typed]
        batches = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(params + args), None)
        return sum(len(b) for b in batches)
    except Exception:  # noqa: BLE001 - a sweep it cannot count: the line says less, nothing fails
        return None


def start_line(plan: Plan, out: Path | None, resumed: int | None) -> str:
    """What starts: the run's name, method, size and length, where its outputs go, the memory
    estimate (the CLI's console and __main__.log, through logging; quiet from Python unless the
    "vecgossip" logger is set to INFO). ``resumed``: the tick or round a checkpoint continues from."""
    cfg = plan.first.cfg
    tick = cfg.engine.name == "tick"
    size = (f"{cfg.topology.nodes} nodes, {cfg.engine.max_ticks} ticks at most" if tick
            else f"{cfg.topology.n} clients, {cfg.engine.rounds} rounds")
    reps = f", {len(plan.runs)} replicas" if len(plan.runs) > 1 else ""
    need = memory.estimate(plan.first, 1, len(plan.runs))[0]
    how = "starting" if resumed is None else f"continuing from {'tick' if tick else 'round'} {resumed}:"
    return (f"{sweep_job()}{how} {cfg.name}: method={cfg.method_name} ({size}{reps}) "
            f"on {cfg.device}, memory estimate {need / 2**30:.2f} GiB -> {out if out is not None else 'no outputs'}")


def run_plan(plan: Plan, out_dir: str | Path | None, sh: shard.Shard) -> dict:
    """:func:`run` after validation, on every rank: rank 0's run directory is every rank's (a shared
    file system across hosts), its checkpoints one file per rank, and rank 0 alone writes outputs."""
    if sh.sharded:
        out_dir = sh.broadcast(None if out_dir is None else str(out_dir))
    out, cfg = (None if out_dir is None else Path(out_dir)), plan.first.cfg
    if out is not None and (out / "summary.json").exists() and cfg.resume in ("auto", True, "true"):
        summary = json.loads((out / "summary.json").read_text())
        summary["_skipped"] = True
        return summary
    name = checkpoint.file_name(sh.rank, sh.world)
    blob = resume_blob(plan, out, name, sh)
    if sh.rank == 0:
        LOG.info(start_line(plan, out, None if blob is None else int(blob["engine"]["t"])))
        for line in [*plan.notes, *dict.fromkeys(line for run in plan.runs for line in rules.cautions(run))]:
            LOG.warning(line)
    check_data(cfg)
    device = pick_device(cfg.device)
    if device.type == "cpu":
        allocator.configure(cfg.engine.malloc)
    torch.manual_seed(cfg.seed)
    allocator.release()                      # a sweep's earlier jobs in this process: not in this one's peak
    memory.reset_peak(device)
    with deterministic(cfg.deterministic), float32_math(cfg.precision, device):
        return execute(plan, out, SETUPS[cfg.engine.name], blob, sh, name)


def resume_blob(plan: Plan, out: Path | None, name: str, sh: shard.Shard) -> dict | None:
    """The checkpoint this run continues from (resume=auto: its directory's, if any), checked to be
    this config's, at one position on every rank."""
    ckpt = checkpoint.find(plan.first.cfg.resume, out, name)
    if sh.sum_int(ckpt is not None) not in (0, sh.world):
        raise ConfigError(f"resume: only some of the {sh.world} ranks' checkpoints are in {out}; "
                          "resume=false starts afresh")
    blob = None if ckpt is None else checkpoint.load_resume(plan.resolved, ckpt)
    if blob is not None and sh.sum_int(blob["pos"]) != blob["pos"] * sh.world:
        raise ConfigError(f"resume: the {sh.world} ranks' checkpoints in {out} are from different positions "
                          "(a kill while they were written); resume=false starts afresh")
    return blob


@contextmanager
def deterministic(on: bool):
    """deterministic=true: torch's deterministic algorithms (cuBLAS with a fixed workspace) and the
    atomic-free sparse products of network/mixing.py, for the run only."""
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


def summarize(run, setup, hist, engine, raw: DictConfig) -> dict:
    """The engine's summary of one run, with its config, the short knobs some part of it reads
    (``knobs_read``, from the plan's composed config ``raw``: a replica's own config holds its
    values in place of the interpolations; ``beta`` for gossip, not for AD-PSGD; the report leaves
    the others blank),
    versions, threads and memory (the peak measured since the run started beside
    runtime/memory.estimate's figure)."""
    summary = setup.summarize(run, hist, engine)
    device = pick_device(run.cfg.device)
    summary["memory"] = {"peak_bytes": memory.peak(device), "estimate_bytes": memory.estimate(run)[0],
                         "peak_of": "CUDA allocations" if device.type == "cuda" else "process resident set"}
    summary.update({"config": run.resolved,
                    "knobs_read": sorted(k for k in consumed(raw) if k in KNOBS),   # the report shows only these
                    "versions": {"vecgossip": __version__, "torch": torch.__version__,
                                 "python": platform.python_version()},
                    "threads": torch.get_num_threads()})
    return summary


def write_models(out: Path, run, engine, theta: torch.Tensor) -> None:
    data = engine.train_data
    save_models(out / "models.pt", run.cfg.model.name, data.shape, data.num_classes, theta, run.cfg.model.norm)


def write_clock_nodes(out: Path, table: pd.DataFrame | None, round_ends: np.ndarray | None = None) -> None:
    """clock_nodes.csv (clock.enabled: the engine's per-node clock table) and, under per-node
    barriers, clock_round_ends.npy ((rounds, n) seconds: when each node finished each round),
    before summary.json."""
    if table is not None:
        out.mkdir(parents=True, exist_ok=True)
        write_csv(table, out / "clock_nodes.csv")
    if round_ends is not None:
        write_npy(round_ends, out / "clock_round_ends.npy")


def round_ends(engine) -> np.ndarray | None:
    """Each node's end of each round (clock.barrier=node: the clock's ``node_ends``), else None."""
    ends = getattr(getattr(engine, "timer", None), "node_ends", None)
    return None if ends is None else np.array(ends, dtype=np.float64).reshape(len(ends), engine.timer.n)


def replica_outputs(plan: Plan, hist, engine, setup, writer: Path | None) -> dict:
    """replicas=S: each replica's summary and outputs in ``replica{s}/`` (a separate run's files),
    then the top level's metrics.csv (``replica`` column) and aggregate summary.json."""
    summaries = [summarize(r, setup, h, e, plan.raw) for r, h, e in zip(plan.runs, hist.parts, engine.engines)]
    top = replicas.aggregate(plan.resolved, summaries, hist.wall_seconds)
    if writer is not None:
        for s, (r, h, e, sm) in enumerate(zip(plan.runs, hist.parts, engine.engines, summaries)):
            if r.cfg.save_models:
                write_models(writer / f"replica{s}", r, e, e.state.theta.clone())   # not the whole stack
            write_clock_nodes(writer / f"replica{s}", setup.clock_nodes(e, h), round_ends(e))
            setup.write_outputs(writer / f"replica{s}", r, h, sm)
        replicas.write_outputs(writer, hist.rows, top)
    top["replica_summaries"] = summaries
    return top


def single_outputs(plan: Plan, hist, engine, setup, writer: Path | None, out: Path | None, sh) -> dict:
    """One run's summary and outputs (rank 0 writes; sharded, the models are gathered first)."""
    run = plan.first
    summary = summarize(run, setup, hist, engine, plan.raw)
    if sh.sharded:
        summary["shards"] = {"processes": sh.world, "exchange": sh.exchange,
                             "model_bytes_received_rank0": sh.broadcast(sh.bytes_in)}
    models = None
    if out is not None and run.cfg.save_models:
        models = sh.gather_rows(engine.state.theta, sh.sizes, models=False)   # all rows, on every rank
    if writer is not None:
        if models is not None:
            write_models(writer, run, engine, models)
        write_clock_nodes(writer, setup.clock_nodes(engine, hist), round_ends(engine))
        setup.write_outputs(writer, run, hist, summary)
    return summary


def checkpointer_for(plan: Plan, out: Path | None, blob: dict | None, name: str, sh):
    cfg = plan.first.cfg
    if out is None or (cfg.checkpoint_every is None and cfg.checkpoint_seconds is None):
        return None
    return checkpoint.Checkpointer(out, cfg.checkpoint_every, cfg.checkpoint_seconds,
                                   {"fingerprint": checkpoint.fingerprint(plan.resolved)},
                                   start=0 if blob is None else blob["pos"], name=name,
                                   agree=sh.any if sh.sharded else None)


def execute(plan: Plan, out: Path | None, setup, blob: dict | None, sh: shard.Shard,
            name: str = checkpoint.FILE) -> dict:
    """Build, simulate (from the checkpoint ``blob`` when resuming), summarise, write (rank 0)."""
    try:
        engine = setup.build_engine(plan.first, shard=sh) if len(plan.runs) == 1 else setup.build_replicas(plan.runs)
    except FileNotFoundError as err:   # data that was to be downloaded did not come: where to put it
        raise ConfigError(str(err)) from None
    writer = out if sh.rank == 0 else None     # where outputs go: rank 0's run directory
    checkpointer = checkpointer_for(plan, out, blob, name, sh)
    tracker = tracking.make(plan.first.cfg.logger, OmegaConf.to_yaml(plan.raw, resolve=True), writer,
                            resumed=blob is not None)
    if blob is not None and sh.rank == 0:
        unit = "tick" if plan.first.cfg.engine.name == "tick" else "round"
        print(f"[vecgossip] continuing from {unit} {int(blob['engine']['t'])} (the checkpoint in {out})",
              file=sys.stderr, flush=True)
    with checkpoint.on_signals(checkpointer):   # also while writing: a signal then lets the outputs finish
        hist = engine.run(progress=plan.first.cfg.progress,
                          on_eval=tracking.chain(None if writer is None else periodic_flush(writer), tracker),
                          checkpointer=checkpointer, resume=None if blob is None else blob["engine"])
        if tracker is not None:
            tracker.close(hist)
        if hist.interrupted:
            if writer is not None:
                write_csv(pd.DataFrame(hist.rows), writer / "metrics.csv")
            raise Interrupted(checkpointer.last_pos, checkpointer.path if not sh.sharded else checkpointer.path.parent)
        summary = (replica_outputs(plan, hist, engine, setup, writer) if len(plan.runs) > 1
                   else single_outputs(plan, hist, engine, setup, writer, out, sh))
        sh.sum_int(0)                              # sharded: every rank past the outputs (a barrier)
        if out is not None and hist.diverged is None:
            (out / name).unlink(missing_ok=True)   # the run is complete: summary.json marks it
    if checkpointer is not None and checkpointer.requested and not hist.interrupted:
        print("vecgossip: a stop signal came while the outputs were written; they are complete", file=sys.stderr)
        summary["_stop"] = True                    # the CLI stops there (a sweep runs no further job)
    summary["_history"] = hist
    if hist.diverged is not None:
        kept = out / name if out is not None and (out / name).exists() else None
        raise DivergedRun(hist.diverged["message"] + "; outputs written"
                          + (f"; last checkpoint (all nodes finite): {kept}" if kept else ""))
    return summary
