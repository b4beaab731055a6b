"""Issue 23, item 7: the worked plug-in examples/dfedprox (decentralized FedProx, NOT built in),
written against the public interface only, run as a user runs it: its own package on the path, its
config folder on Hydra's search path. It must equal its per-client loop twin (plain nn.Modules,
the proximal term and momentum written out, gossip as Python loops over W_ij), also under message
drops; and through the CLI it must give the same outputs as the Python API, as separate runs
under replicas=2, as one process under torchrun with 2 gloo ranks, and as an uninterrupted run
after SIGKILL and resume."""
from __future__ import annotations

import ast
import copy
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import comparable, faults_of, torch_threads, run_of, kill_at_first_checkpoint

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "dfedprox"
SEARCH = "hydra.searchpath=[pkg://dfedprox_plugin.conf]"
BASE = [SEARCH, "method=dfedprox", "model=mlp", "topology=ring", "clients=6", "rounds=4", "eval_every=1",
        "local_steps=3", "local_epochs=null", "data.batch_size=16", "data.global_test_size=100",
        "data.local_test_size=20", "algorithm.mu=0.5", "progress=false"]
WALL = ("wall_seconds", "seconds_per_round", "threads", "shards")


@pytest.fixture(autouse=True)
def plugin_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))


def env() -> dict:
    e = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                          "MASTER_PORT")}
    e.update(PYTHONPATH=os.pathsep.join([str(EXAMPLE), e.get("PYTHONPATH", "")]), OMP_NUM_THREADS="1",
             MPLBACKEND="Agg")
    return e


def cli(out: Path, extra: list[str], data_root, ranks: int = 1, wait: bool = True):
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
                if ranks > 1 else [sys.executable])
    cmd = [*launcher, "-m", "vecgossip", *BASE, *extra, f"data_root={data_root}", f"hydra.run.dir={out}"]
    if not wait:
        return subprocess.Popen(cmd, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    proc = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def same_outputs(a: Path, b: Path) -> None:
    for name in ("metrics.csv", "accuracy.npy"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    sa, sb = (comparable(json.loads((d / "summary.json").read_text()), WALL) for d in (a, b))
    for s in (sa, sb):
        s["config"].pop("data_root", None)
        s["config"]["data"].pop("root", None)
    assert sa == sb


# -- it is written against the public interface only --------------------------------------------
def test_the_example_uses_only_public_names():
    import vecgossip.algorithms as public
    from vecgossip.algorithms import RoundServices
    tree = ast.parse((EXAMPLE / "dfedprox_plugin" / "algorithm.py").read_text())
    imported = [(n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
                for a in n.names if n.module.startswith("vecgossip")]
    assert imported and all(mod == "vecgossip.algorithms" and name in public.__all__ for mod, name in imported), imported
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Import) and any(a.name.startswith("vecgossip")
                                                                              for a in n.names)]
    services = set(RoundServices.__annotations__) | {n for n, _ in inspect.getmembers(RoundServices)
                                                     if not n.startswith("_")}
    used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id == "ctx"}
    assert used and used <= services, used - services     # only the documented services of the engine


# -- its loop twin ------------------------------------------------------------------------------
def engine_of(extra: list[str], base: list[str] = BASE):
    import vecgossip
    from vecgossip.composition import rounds as setup
    cfg = vecgossip.compose(overrides=[*base, "precision=fp64", *extra])
    return cfg, setup.build_engine(run_of(cfg))


def loop_twin(cfg, engine, sampler, faults, init: torch.Tensor) -> torch.Tensor:
    """DFedProx client by client: plain modules, g = grad + mu (w - anchor) + wd w, v = m v + g,
    w -= lr v; then x_i = sum_j W_ij x_j (Metropolis-Hastings on the ring, computed here), a
    dropped message j -> i replaced by the receiver's own model (one draw per W_ij, row-major)."""
    from vecgossip.models import build as build_model
    from vecgossip.core.state import flatten, load_flat
    m, o, mu = engine.m, cfg.optim, cfg.algorithm.mu
    data = engine.train_data
    nets = []
    for i in range(m):
        net = build_model(cfg.model.name, data.shape, data.num_classes).to(init.dtype)
        load_flat(net, engine.layout, init[i])
        nets.append(net)
    vel = [[torch.zeros_like(p) for p in net.parameters()] for net in nets]
    w = np.zeros((m, m))
    for i in range(m):                                          # a ring: every degree 2, W_ij = 1/3
        for j in ((i - 1) % m, (i + 1) % m):
            w[i, j] = 1 / 3
        w[i, i] = 1 - w[i].sum()
    for t in range(cfg.engine.rounds):
        lr = o.lr * o.lr_decay ** t
        anchors = [[p.detach().clone() for p in net.parameters()] for net in nets]
        for _ in range(cfg.engine.local_steps):
            batch = sampler.next(torch.arange(m))
            for i, net in enumerate(nets):
                x, y, wt = batch.materialise(data, i, i + 1)
                keep = wt[0] > 0
                net.zero_grad()
                F.cross_entropy(net(x[0][keep]), y[0][keep]).backward()
                with torch.no_grad():
                    for p, a, v in zip(net.parameters(), anchors[i], vel[i]):
                        g = p.grad + mu * (p - a) + o.weight_decay * p
                        v.mul_(o.momentum).add_(g)
                        p.sub_(lr * v)
        flat = [flatten(net) for net in nets]
        new = []
        for i in range(m):
            acc = w[i, i] * flat[i]
            for j in range(m):
                if j != i and w[i, j]:
                    ok = faults is None or bool(faults.kept(1)[0])
                    acc = acc + w[i, j] * (flat[j] if ok else flat[i])
            new.append(acc)
        for i in range(m):
            load_flat(nets[i], engine.layout, new[i])
    return torch.stack([flatten(net) for net in nets])


@pytest.mark.parametrize("extra", [[], ["faults.drop=0.2"]], ids=["plain", "drop0.2"])
def test_example_matches_its_loop_twin(data_root, extra):
    cfg, engine = engine_of([f"data_root={data_root}", *extra])
    init = engine.state.theta.clone()
    sampler = copy.copy(engine.sampler)
    sampler.gen = torch.Generator().set_state(engine.sampler.gen.get_state())
    sampler.order, sampler.step = engine.sampler.order.clone(), engine.sampler.step.clone()
    faults = faults_of(cfg, engine.m) if extra else None
    engine.run(progress=False)
    want = loop_twin(cfg, engine, sampler, faults, init)
    rel = (engine.state.theta - want).norm(dim=1) / want.norm(dim=1)
    assert rel.max() < 1e-10, rel
    assert (want - init).norm() > 1e-2 * init.norm()               # it trained
    assert engine.state.extra["anchor"].shape == (6, engine.layout.params_size)
    if faults is not None:
        assert engine.faults.lost > 0


def test_mu_zero_is_dfedavgm(data_root):
    """The proximal term off, the plug-in's own update is DFedAvgM's built-in one (fp64)."""
    _, prox = engine_of([f"data_root={data_root}", "algorithm.mu=0"])
    _, ref = engine_of([f"data_root={data_root}", "method=dfedavgm"], [o for o in BASE if "algorithm.mu" not in o])
    assert ref.algorithm.name() == "vecgossip.algorithms.dfedavg.DFedAvg"
    prox.run(progress=False)
    ref.run(progress=False)
    assert torch.allclose(prox.state.theta, ref.state.theta, rtol=0, atol=1e-12)


# -- through the CLI, as the built-ins ------------------------------------------------------------
def test_cli_equals_the_python_api(tmp_path, data_root):
    import vecgossip
    cli(tmp_path / "cli", [], data_root)
    with torch_threads(1):                      # the CLI process runs one thread (OMP_NUM_THREADS=1)
        res = vecgossip.run(vecgossip.compose(overrides=[*BASE, f"data_root={data_root}"]), run_dir=tmp_path / "api")
    same_outputs(tmp_path / "cli", tmp_path / "api")
    s = res.summary
    assert s["algorithm"] == "dfedprox_plugin.algorithm.DFedProx" and s["method_params"] == {"mu": 0.5}
    assert s["config"]["algorithm"] == {"_target_": "dfedprox_plugin.algorithm.DFedProx", "mu": 0.5}


def test_replicas_equal_separate_runs(tmp_path, data_root):
    cli(tmp_path / "both", ["replicas=2"], data_root)
    for s in (0, 1):
        cli(tmp_path / f"seed{s}", [f"seed={s}"], data_root)
        for name in ("metrics.csv", "accuracy.npy"):
            assert (tmp_path / "both" / f"replica{s}" / name).read_bytes() == (tmp_path / f"seed{s}" / name).read_bytes()


@pytest.mark.slow   # a plain round algorithm's sharding is tests/test_distributed.py's; the per-edge example (test_trust_gossip_example.py) shards a plug-in's own state by default
def test_two_gloo_ranks_equal_one_process(tmp_path, data_root):
    cli(tmp_path / "one", [], data_root)
    cli(tmp_path / "two", [], data_root, ranks=2)
    same_outputs(tmp_path / "one", tmp_path / "two")
    assert json.loads((tmp_path / "two" / "summary.json").read_text())["shards"]["processes"] == 2


@pytest.mark.slow   # resume is tests/test_resume.py's; the per-edge example resumes a plug-in's own state by default
def test_sigkill_then_resume_equals_an_uninterrupted_run(tmp_path, data_root):
    long = ["rounds=40", "checkpoint_every=1"]
    cli(tmp_path / "ref", long, data_root)
    run = tmp_path / "run"
    proc = cli(run, long, data_root, wait=False)
    kill_at_first_checkpoint(proc, run)
    blob = torch.load(run / "checkpoint.pt", weights_only=False)
    assert "anchor" in blob["engine"]["extra"]            # the declared state is in the checkpoint
    cli(run, long, data_root)                            # the same command again resumes
    same_outputs(tmp_path / "ref", run)


def test_the_plugins_own_yaml_is_checked(tmp_path, data_root):
    """A key the plug-in's Params does not have, or a value of the wrong type, stops the run with
    one line (exit 2), from the command line as from a YAML preset."""
    cases = [(["+algorithm.muu=1"], "unknown option algorithm.muu; dfedprox_plugin.algorithm.DFedProx takes: mu (did you mean mu?)"),
             (["algorithm.mu=abc"], "algorithm.mu must be a number, got 'abc'"),
             (["algorithm.mu=-1"], "mu must be >= 0"),
             (["algorithm._target_=dfedprox_plugin.missing.Algo"], "cannot be imported")]
    for extra, message in cases:
        proc = subprocess.run([sys.executable, "-m", "vecgossip", *BASE, *extra, f"data_root={data_root}",
                               f"hydra.run.dir={tmp_path / 'x'}"], env=env(), capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
