"""The Python API, for scripts and notebooks: compose a config, run it, read the results.

    import vecgossip
    res = vecgossip.run("dfedsam", topology="ring", clients=16, rounds=50, data="cifar10", model="cnn")
    res.metrics.tail()            # metrics.csv as a pandas DataFrame
    res.accuracy.shape            # (evaluations, nodes): accuracy.npy
    res.summary["final"]          # summary.json
    res.run_dir                   # the folder holding every output file

    cfg = vecgossip.compose("vc", experiment="table1", nodes=50, overrides=["optim.lr=0.02"])
    res = vecgossip.run(cfg, run_dir="runs/mine")

Keyword arguments are the command line's ``key=value`` overrides (the short knobs and the
groups: ``topology="ring"``, ``data="cifar10"``); dotted keys go in ``overrides``; ``experiment``
picks a preset (``+experiment=NAME``). Everything is validated as on the command line, and a bad
value raises :class:`vecgossip.ConfigError` naming the option. No Hydra run directory is needed:
outputs go to ``run_dir`` (default: a new temporary folder, kept)."""
from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf

CONF = Path(__file__).resolve().parent / "conf"


@dataclass
class Result:
    """One finished run: its summary.json, metrics.csv, per-node accuracies and folder."""

    summary: dict
    """summary.json as a dict: the run's config, its final and best metrics, reach ticks (tick
    engine), memory, wall time, and ``privacy`` / ``adversary`` / ``diverged`` where they apply."""
    metrics: pd.DataFrame
    """metrics.csv: one row per evaluation (``tick`` or ``round``, accuracies, losses, consensus,
    bytes, and epsilon under privacy.*)."""
    accuracy: np.ndarray
    """accuracy.npy: (evaluations, nodes) each node's accuracy at each evaluation (NaN: a diverged or
    Byzantine node); a ``replicas=S`` run: of its first replica."""
    run_dir: Path
    """The run's folder (pass it again as ``run_dir`` to get the finished run back, or to resume)."""

    def __repr__(self) -> str:
        return (f"Result(method={self.summary.get('method')!r}, engine={self.summary.get('engine')!r}, "
                f"rows={len(self.metrics)}, run_dir='{self.run_dir}')")


def _value(v: Any) -> str:
    """A Python value as Hydra's override grammar reads it."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_value(x) for x in v) + "]"
    return str(v)


def overrides_of(method: str | None = None, experiment: str | None = None, overrides: Iterable[str] = (),
                 **knobs: Any) -> list[str]:
    """The command-line overrides that :func:`compose` applies, in order."""
    out = [] if experiment is None else [f"+experiment={experiment}"]
    if method is not None:
        out.append(f"method={method}")
    out += [f"{k}={_value(v)}" for k, v in knobs.items()]
    return out + list(overrides)


def compose(method: str | None = None, *, experiment: str | None = None, overrides: Iterable[str] = (),
            **knobs: Any) -> DictConfig:
    """The run's config from the package's presets plus overrides, validated (ConfigError if not).
    ``method`` None keeps the config's default method (``gossip``)."""
    from hydra import compose as hydra_compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from vecgossip.core.errors import ConfigError
    from vecgossip.config.load import composition_error
    from vecgossip.composition.root import validate
    over = overrides_of(method, experiment, overrides, **knobs)
    was = GlobalHydra.instance().is_initialized()
    try:
        if was:                                   # inside a Hydra app: compose with its search path
            cfg = hydra_compose(config_name="config", overrides=over)
        else:
            with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
                cfg = hydra_compose(config_name="config", overrides=over)
    except (HydraException, OmegaConfBaseException) as err:
        def without(key: str):
            kept = [o for o in over if o.split("=", 1)[0].lstrip("+~") != key]
            if was:
                return hydra_compose(config_name="config", overrides=kept)
            with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
                return hydra_compose(config_name="config", overrides=kept)
        raise ConfigError(composition_error(err, without)) from None
    validate(cfg, over)
    return cfg


def run(config: DictConfig | str | None = None, *, run_dir: str | Path | None = None, progress: bool = False,
        experiment: str | None = None, overrides: Iterable[str] = (), **knobs: Any) -> Result:
    """Run one simulation and return its :class:`Result`. ``config``: a composed config (then no
    other overrides), or a method name composed with ``experiment``, ``overrides`` and ``knobs``.
    ``progress``: the tqdm bar. The same ``run_dir`` again returns the finished run (resume=auto)."""
    from vecgossip.composition.root import run as sim_run
    if isinstance(config, DictConfig):
        if experiment is not None or list(overrides) or knobs:
            raise TypeError("vecgossip.run(cfg): pass overrides to vecgossip.compose, not with a composed config")
        cfg = config
    else:
        cfg = compose(config, experiment=experiment, overrides=overrides, **knobs)
    cfg = cfg.copy()
    OmegaConf.update(cfg, "progress", bool(progress))
    out = Path(run_dir) if run_dir is not None else Path(tempfile.mkdtemp(prefix="vecgossip-"))
    out.mkdir(parents=True, exist_ok=True)
    sim_run(cfg, out)
    summary = json.loads((out / "summary.json").read_text())        # what is on disk, JSON-plain
    first = out if (out / "accuracy.npy").exists() else out / "replica0"
    return Result(summary, pd.read_csv(out / "metrics.csv"), np.load(first / "accuracy.npy"), out)
