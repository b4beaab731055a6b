"""Every experiment config composes and validates; bad values fail before any work, naming the option."""
from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from vecgossip.core.errors import ConfigError
from vecgossip.engines.tick.config import t_acq_range as parse_t_acq
from vecgossip.composition.root import validate

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "vecgossip" / "conf"
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


def make(overrides=()):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def test_default_is_the_paper_baseline():
    cfg = make()
    validate(cfg)
    assert (cfg.topology.name, cfg.topology.n, cfg.topology.k) == ("regular", 50, 8)
    assert (cfg.averaging.beta, cfg.averaging.correction, cfg.averaging.R) == (0.5, False, 1)
    assert parse_t_acq(cfg.engine.t_acq) == (10, 10)
    assert (cfg.model.name, cfg.data.batch_size, cfg.data.eval_set, cfg.engine.max_ticks) == ("lenet", 64, "fixed100", 10000)
    assert cfg.engine.eval_every == 10 and cfg.data.alpha is None
    assert list(cfg.compare) == ["gossip", "vc"] and cfg.compare_ticks == 1000   # the default job: side by side


PROJECT_MACHINE = 24 << 30    # the CPU machines these presets are sized for (README: 2 cores, 24 GiB)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_composes(name, monkeypatch):
    """Composes, validates, and fits the project's 24 GiB machine: the memory check sees that
    machine's whole memory, not what this one has free at the moment (a busy machine would fail
    a preset that fits, e.g. dfedsam_paper's 13.8 GiB beside a running sweep)."""
    import vecgossip.runtime.memory
    monkeypatch.setattr(vecgossip.runtime.memory, "available", lambda device: PROJECT_MACHINE)
    cfg = make([f"+experiment={name}"])
    validate(cfg)
    OmegaConf.to_container(cfg, resolve=True)
    assert cfg.name == name


def test_vc_is_beta0_with_correction():
    cfg = make(["+experiment=vc"])
    assert cfg.averaging.beta == 0.0 and cfg.averaging.correction is True


def test_short_knobs_reach_the_groups():
    cfg = make(["nodes=1000", "degree=32", "t_acq=[1,19]", "R=4", "alpha=0.5", "data_root=/x"])
    validate(cfg)
    assert (cfg.topology.n, cfg.topology.k, cfg.averaging.R, cfg.data.alpha, cfg.data.root) == (1000, 32, 4, 0.5, "/x")
    assert parse_t_acq(cfg.engine.t_acq) == (1, 19)


@pytest.mark.parametrize("overrides,match", [
    (["degree=50"], "topology.k"),
    (["nodes=9", "degree=3"], r"topology.n \(nodes\) x topology.k \(degree\) must be even"),
    (["nodes=-5"], "topology.n"),
    (["beta=1.5"], "algorithm.beta"),
    (["R=0"], "algorithm.R"),
    (["t_acq=0"], "t_acq"),
    (["t_acq=[19,1]"], "t_acq"),
    (["alpha=-1"], "data.alpha"),
    (["max_ticks=0"], "engine.max_ticks"),
    (["eval_every=-10"], "engine.eval_every"),
    (["correction=maybe"], "algorithm.correction \\(correction\\) must be true or false, got .maybe."),
    (["device=tpu"], "device='tpu' is unknown; allowed: cpu, cuda, cuda:N, auto"),
    (["model.impl=jit"], "model.impl"),
    (["data.eval_set=some"], "data.eval_set"),
    (["optim.lr_policy=step"], "optim.lr_policy"),
    (["data.batch_size=-64"], "data.batch_size"),
    (["engine.train_chunk=0"], "engine.train_chunk"),
    (["engine.eval_chunk=big"], "engine.eval_chunk"),
    (["engine.malloc=jemalloc"], "engine.malloc='jemalloc' is unknown; allowed: tuned, default"),
    (["model=resnet18", "data=cifar10", "model.norm=layer"], "model.norm='layer' is unknown; allowed: batch, group"),
    (["model=vgg11", "data=cifar10", "model.average_buffers=maybe"], "model.average_buffers must be null or true or false, got .maybe."),
    (["model=resnet18", "data=cifar10", "method=gossip", "model.average_buffers=false"],
     "model.average_buffers=false is a round-engine option"),
    (["precision=fp16"], "precision='fp16' is unknown; allowed: tf32, fp32, bf16, fp64"),
    (["precision=bf16"], "precision=bf16 runs on the vmap path: add model.impl=vmap"),
])
def test_invalid_values_fail_fast(overrides, match):
    with pytest.raises((ConfigError, ValueError), match=match):
        validate(make(overrides))


def test_unknown_keys_and_groups_are_rejected():
    with pytest.raises(ConfigCompositionException):
        make(["nodez=5"])
    with pytest.raises(ConfigCompositionException):
        make(["topology=torus"])
    with pytest.raises(ConfigCompositionException):
        make(["+experiment=nope"])


def test_auto_chunks_follow_the_measured_policy():
    import torch
    from vecgossip.models.chunks import resolve_chunk
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert resolve_chunk("auto", cpu, 64, "lenet") == 4
    assert resolve_chunk("auto", cpu, 8, "lenet") == 10
    assert resolve_chunk("auto", cpu, 100, "lenet") == 2
    assert resolve_chunk("auto", cpu, 64, "mlp") == 1024
    assert resolve_chunk("auto", gpu, 64, "lenet") == 1024
    assert resolve_chunk(7, cpu, 64, "lenet") == 7


@pytest.mark.parametrize("name,checks", [
    ("baseline", {"method_name": "gossip", "averaging.beta": 0.5, "averaging.correction": False}),
    ("vc", {"method_name": "vc", "averaging.beta": 0.0, "averaging.correction": True}),
    ("fig3", {"topology.name": "star", "topology.n": 50, "model.shared_init": False, "averaging.beta": 0.5}),
    ("fig4", {"method_name": "compression", "averaging.compression": 0.2, "averaging.beta": 0.5}),
    ("fig5", {"method_name": "tl", "engine.tl.enabled": True}),
    ("fig6", {"model.broadcast_init": True, "averaging.correction": False}),
    ("fig8", {"averaging.beta": 0.0, "engine.early_stop": True}),
])
def test_experiment_presets_set_what_the_figure_needs(name, checks):
    cfg = make([f"+experiment={name}"])
    for key, want in checks.items():
        assert OmegaConf.select(cfg, key) == want, (name, key)


def test_fedavg_tick_method_is_a_star_server_with_shared_init():
    cfg = make(["+experiment=fig8", "method=fedavg_tick"])
    validate(cfg)
    assert (cfg.topology.name, cfg.algorithm._target_, cfg.model.shared_init, cfg.method_name) == (
        "star", "vecgossip.algorithms.fedavg_tick.FedAvgTick", True, "fedavg_tick")


def test_allocator_modes():
    import platform
    import sys
    from vecgossip.runtime import allocator
    assert allocator.configure("default") is False  # leaves glibc alone
    with pytest.raises(ValueError, match="engine.malloc='big' is unknown; allowed: tuned, default"):
        allocator.configure("big")
    if sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc":
        assert allocator.configure("tuned") is True  # glibc accepted both thresholds


def test_release_frees_a_finished_runs_cycles():
    """A sweep's jobs share one process: what an earlier job left in reference cycles (an engine and
    its group point at each other) must be gone before the next job's peak is measured."""
    import gc
    import weakref

    import torch

    from vecgossip.runtime import allocator

    class Node:
        pass

    gc.disable()                      # no automatic collection in between: only release() may free it
    try:
        a, b = Node(), Node()
        a.other, b.other, a.state = b, a, torch.zeros(1000)   # a cycle holding a tensor
        gone = weakref.ref(a.state)
        del a, b
        assert gone() is not None     # reference counting alone does not free a cycle
        allocator.release()
        assert gone() is None
    finally:
        gc.enable()
