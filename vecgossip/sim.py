"""Build a simulation from a config, run it, write its outputs. ``run(cfg, out_dir)`` is what the
entry point and the tests call. Every option is validated before any data is loaded."""
from __future__ import annotations

import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from omegaconf import DictConfig, OmegaConf

from . import __version__, allocator
from .allocator import MODES as MALLOC_MODES
from .data import EVAL_SETS, dirichlet_label_probs, eval_indices, load_mnist
from .engines.tick import History, TickConfig, TickEngine
from .metrics import first_reach_tick, most_reach_tick, plateau_delay_tick
from .peers import Links, TLConfig
from .models import IMPLS, MODELS, get_model, make_forward
from .optim import SGDConfig
from .outputs import plot_accuracy, plot_layers, write_csv, write_json, write_npy
from .stack import INIT_SCHEMES, Layout, init_theta, new_state
from .topology import TOPOLOGIES, build

DEVICES = ("cpu", "cuda", "auto")


class ConfigError(ValueError):
    """An option has a value the simulator cannot run with; the message names it."""


def _int(cfg: DictConfig, key: str, minimum: int) -> int:
    v = OmegaConf.select(cfg, key)
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ConfigError(f"{key} must be an integer >= {minimum}, got {v!r}")
    return v


def _num(cfg: DictConfig, key: str, lo: float, hi: float) -> float:
    v = OmegaConf.select(cfg, key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise ConfigError(f"{key} must be a number in [{lo}, {hi}], got {v!r}")
    return float(v)


def _choice(cfg: DictConfig, key: str, allowed) -> str:
    v = OmegaConf.select(cfg, key)
    if v not in allowed:
        raise ConfigError(f"{key}={v!r} is unknown; allowed: {', '.join(map(str, allowed))}")
    return v


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


def validate(cfg: DictConfig) -> None:
    """Fail fast, before any work, on every option the run depends on."""
    _choice(cfg, "device", DEVICES)
    _int(cfg, "seed", 0)
    _choice(cfg, "model.name", MODELS)
    _choice(cfg, "model.impl", IMPLS)
    _choice(cfg, "model.init", INIT_SCHEMES)
    _choice(cfg, "topology.name", TOPOLOGIES)
    _int(cfg, "topology.n", 2)
    if cfg.topology.name == "regular":
        n, k = cfg.topology.n, _int(cfg, "topology.k", 1)
        if k >= n:
            raise ConfigError(f"topology.k (degree) must be < topology.n (nodes); got k={k}, n={n}")
        if (n * k) % 2:
            raise ConfigError(f"topology: n*k must be even for a k-regular graph; got n={n}, k={k}")
    _int(cfg, "averaging.R", 1)
    comp = OmegaConf.select(cfg, "averaging.compression")
    if isinstance(comp, bool) or not isinstance(comp, (int, float)) or not 0.0 < comp <= 1.0:
        raise ConfigError(f"averaging.compression (compression) must be a probability in (0, 1], got {comp!r}")
    for key in ("engine.server", "engine.tl.enabled", "model.shared_init", "model.broadcast_init"):
        if not isinstance(OmegaConf.select(cfg, key), bool):
            raise ConfigError(f"{key} must be true or false, got {OmegaConf.select(cfg, key)!r}")
    if cfg.engine.server and cfg.topology.name != "star":
        raise ConfigError(f"engine.server=true (federated learning) needs topology=star, got topology={cfg.topology.name}")
    if cfg.engine.tl.enabled:
        _int(cfg, "engine.tl.period", 1)
        _int(cfg, "engine.tl.samples", 1)
        _num(cfg, "engine.tl.add_at", 0.0, 1.0)
        _num(cfg, "engine.tl.drop_at", 0.0, 1.0)
    _num(cfg, "averaging.beta", 0.0, 1.0)
    if not isinstance(cfg.averaging.correction, bool):
        raise ConfigError(f"averaging.correction must be true or false, got {cfg.averaging.correction!r}")
    alpha = cfg.data.alpha
    if alpha is not None and (isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha <= 0):
        raise ConfigError(f"data.alpha (alpha) must be null (IID) or a number > 0, got {alpha!r}")
    _int(cfg, "data.batch_size", 1)
    _choice(cfg, "data.eval_set", EVAL_SETS)
    parse_t_acq(cfg.engine.t_acq)
    _int(cfg, "engine.max_ticks", 1)
    _int(cfg, "engine.eval_every", 1)
    for key in ("engine.eval_chunk", "engine.train_chunk"):
        if OmegaConf.select(cfg, key) != "auto":
            _int(cfg, key, 1)
    _num(cfg, "engine.threshold", 0.0, 1.0)
    _num(cfg, "engine.most_frac", 0.0, 1.0)
    _choice(cfg, "engine.malloc", MALLOC_MODES)
    SGDConfig(**OmegaConf.to_container(cfg.optim))  # its own checks


def resolve_chunk(value, device: torch.device, images_per_node: int, model: str = "lenet") -> int:
    """Nodes per chunk: an int as given, or "auto": on a GPU large chunks fill the device; on a CPU
    the model's measured working-set budget (ModelDef.cpu_chunk). LeNet on this 2-core CPU, train
    B=64: 8.7 ms/node at 4 nodes (256 images) vs 14.6 at 200; B=8: best at 10 nodes; eval of 100
    images: 4.7-4.9 ms/node at 2-5 nodes vs 8.9 at 200 (benchmarks/RESULTS.md)."""
    if value != "auto":
        return int(value)
    images, cap = (1 << 16, 4096) if device.type == "cuda" else get_model(model).cpu_chunk
    return max(1, min(cap, images // images_per_node))


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device=cuda but no CUDA device is available; use device=cpu or device=auto")
    return torch.device(name)


def build_engine(cfg: DictConfig) -> TickEngine:
    """Everything from the config: graph, initial state, data, samplers, engine."""
    device = pick_device(cfg.device)
    seed = int(cfg.seed)
    np_rng = np.random.default_rng(seed)
    init_gen = torch.Generator().manual_seed(seed)
    sample_gen = torch.Generator(device=device).manual_seed(seed + 1)

    graph = build(cfg.topology.name, cfg.topology.n, cfg.topology.get("k"), seed=seed)
    n = graph.n
    model = get_model(cfg.model.name)
    layout = Layout.of(model.factory())
    theta = init_theta(layout, n, cfg.model.init, init_gen, shared=cfg.model.shared_init, device=device)
    if cfg.model.broadcast_init:   # Fig. 6: one averaged model given to every node before training
        theta[:] = theta.mean(0, keepdim=True)
    state = new_state(layout, theta)

    train = load_mnist(cfg.data.root, train=True, download=cfg.data.download, device=device)
    test = load_mnist(cfg.data.root, train=False, download=cfg.data.download, device=device)
    ei = eval_indices(test.labels, cfg.data.eval_set)
    eval_x, eval_y = test.batch(ei)
    probs = dirichlet_label_probs(n, cfg.data.alpha, np_rng)
    if probs is not None:
        probs = probs.to(device)

    tl = cfg.engine.tl
    tcfg = TickConfig(t_acq=parse_t_acq(cfg.engine.t_acq), R=int(cfg.averaging.R), beta=float(cfg.averaging.beta),
                      correction=bool(cfg.averaging.correction), compression=float(cfg.averaging.compression),
                      server=0 if cfg.engine.server else None,
                      tl=TLConfig(tl.period, tl.add_at, tl.drop_at, tl.samples) if tl.enabled else None,
                      batch_size=cfg.data.batch_size,
                      max_ticks=cfg.engine.max_ticks, eval_every=cfg.engine.eval_every,
                      early_stop=bool(cfg.engine.early_stop), threshold=float(cfg.engine.threshold),
                      most_frac=float(cfg.engine.most_frac),
                      eval_chunk=resolve_chunk(cfg.engine.eval_chunk, device, int(eval_y.numel()), cfg.model.name),
                      train_chunk=resolve_chunk(cfg.engine.train_chunk, device, cfg.data.batch_size, cfg.model.name))
    links = Links(graph, active=tcfg.tl is None)   # TL: every node starts with no peers
    return TickEngine(tcfg, state, links, make_forward(cfg.model.name, cfg.model.impl),
                      SGDConfig(**OmegaConf.to_container(cfg.optim)), train, probs, eval_x, eval_y,
                      sample_gen, np_rng, test=test)


def summarize(cfg: DictConfig, hist: History, n: int) -> dict:
    ticks = np.array([r["tick"] for r in hist.rows])
    acc = np.stack(hist.acc)
    thr, frac = float(cfg.engine.threshold), float(cfg.engine.most_frac)
    return {
        "name": cfg.get("name", "run"),
        "n_nodes": n,
        "n_reported": int(acc.shape[1]),
        "threshold": thr,
        "method": cfg.get("method_name", "gossip"),
        "method_params": {k: OmegaConf.select(cfg, k) for k in ("averaging.beta", "averaging.correction",
                                                          "averaging.compression", "averaging.R",
                                                          "engine.tl.enabled", "engine.server")},
        "first_reach_tick": first_reach_tick(ticks, acc, thr),
        "most_reach_tick": most_reach_tick(ticks, acc, thr, frac),
        "plateau_delay_tick": plateau_delay_tick(ticks, acc.mean(1), hist.t_first_average),
        "first_average_tick": hist.t_first_average,
        "ticks_run": hist.ticks_run,
        "stopped_early": hist.stopped_early,
        "wall_seconds": round(hist.wall_seconds, 3),
        "ticks_per_second": round(hist.ticks_run / max(hist.wall_seconds, 1e-9), 3),
        "final_acc_mean": float(acc[-1].mean()),
        "initial_layer_variance": hist.initial_variance,   # before any training or averaging
        "config": OmegaConf.to_container(cfg, resolve=True),
        "versions": {"vecgossip": __version__, "torch": torch.__version__, "python": platform.python_version()},
        "threads": torch.get_num_threads(),
    }


def write_outputs(out: Path, cfg: DictConfig, hist: History, summary: dict) -> None:
    df = pd.DataFrame(hist.rows)
    write_csv(df, out / "metrics.csv")
    write_npy(np.stack(hist.acc).astype(np.float32), out / "accuracy.npy")
    write_npy(df.tick.to_numpy(), out / "ticks.npy")
    title = f"{summary['name']}: N={summary['n_nodes']}"
    plot_accuracy(df, summary, out / "accuracy.png", title)
    plot_layers(df, "var_", "mean weight variance (dot: at initialisation)", out / "variance.png", title,
                summary["initial_layer_variance"])
    plot_layers(df, "wdiff_", "weight difference", out / "weight_difference.png", title)
    write_json(summary, out / "summary.json")  # last: its presence marks a complete run


def periodic_flush(out: Path, every_s: float = 60.0):
    """on_eval callback: rewrite metrics.csv (atomically) at most every ``every_s`` seconds, so a
    long run shows partial results; summary.json still marks completion."""
    last = time.monotonic()

    def flush(hist: History) -> None:
        nonlocal last
        if time.monotonic() - last > every_s:
            write_csv(pd.DataFrame(hist.rows), out / "metrics.csv")
            last = time.monotonic()
    return flush


def run(cfg: DictConfig, out_dir: str | Path | None = None) -> dict:
    """Validate, build, simulate and (if ``out_dir``) write outputs. Returns the summary."""
    validate(cfg)
    if pick_device(cfg.device).type == "cpu":
        allocator.configure(cfg.engine.malloc)
    torch.manual_seed(int(cfg.seed))
    engine = build_engine(cfg)
    hist = engine.run(progress=bool(cfg.get("progress", True)),
                      on_eval=None if out_dir is None else periodic_flush(Path(out_dir)))
    summary = summarize(cfg, hist, engine.state.n)
    if out_dir is not None:
        write_outputs(Path(out_dir), cfg, hist, summary)
    summary["_history"] = hist
    return summary
