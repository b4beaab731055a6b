"""The composition root: validate a config, build the engine its method selects, run it, write its
outputs. ``run(cfg, out_dir)`` is what the entry point and the tests call. Every option is
validated, and the data set's files are found, before any data is loaded or memory allocated.

Each engine's setup lives in ``setups/`` (``engine.name`` = tick | rounds, chosen by the method)."""
from __future__ import annotations

import platform
import time
from pathlib import Path

import pandas as pd
import torch
from omegaconf import DictConfig, OmegaConf

from . import __version__, allocator
from .config import DEVICES, ConfigError, get_choice, get_int, pick_device, resolve_chunk  # noqa: F401
from .datasets import REGISTRY, check_available
from .models import IMPLS, MODELS
from .outputs import write_csv
from .setups import rounds as rounds_setup
from .setups import tick as tick_setup
from .setups.tick import build_engine, parse_t_acq  # noqa: F401  (the tick engine's, re-exported)
from .stack import INIT_SCHEMES

SETUPS = {"tick": tick_setup, "rounds": rounds_setup}


def validate(cfg: DictConfig) -> None:
    """Fail fast, before any work, on every option the run depends on."""
    get_choice(cfg, "engine.name", SETUPS)
    get_choice(cfg, "device", DEVICES)
    get_int(cfg, "seed", 0)
    get_choice(cfg, "model.name", MODELS)
    get_choice(cfg, "model.impl", IMPLS)
    get_choice(cfg, "model.init", INIT_SCHEMES)
    get_choice(cfg, "data.name", REGISTRY)
    SETUPS[cfg.engine.name].validate(cfg)


def check_data(cfg: DictConfig) -> None:
    """The data set's files are where data.root says (or will be downloaded): a clear error if not."""
    try:
        check_available(cfg.data.name, cfg.data.root, bool(cfg.data.download))
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
    """Validate, build, simulate and (if ``out_dir``) write outputs. Returns the summary."""
    validate(cfg)
    check_data(cfg)
    setup = SETUPS[cfg.engine.name]
    if pick_device(cfg.device).type == "cpu":
        allocator.configure(cfg.engine.malloc)
    torch.manual_seed(int(cfg.seed))
    engine = setup.build_engine(cfg)
    hist = engine.run(progress=bool(cfg.get("progress", True)),
                      on_eval=None if out_dir is None else periodic_flush(Path(out_dir)))
    summary = setup.summarize(cfg, hist, engine)
    summary.update({"config": OmegaConf.to_container(cfg, resolve=True),
                    "versions": {"vecgossip": __version__, "torch": torch.__version__,
                                 "python": platform.python_version()},
                    "threads": torch.get_num_threads()})
    if out_dir is not None:
        setup.write_outputs(Path(out_dir), cfg, hist, summary)
    summary["_history"] = hist
    return summary
