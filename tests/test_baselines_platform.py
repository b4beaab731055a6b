"""Issue 24: every new baseline gets the platform's machinery as the built-ins do: ``replicas=2``
equals two separate runs, 2 gloo ranks under torchrun equal one process (byte for byte, one thread
each), a run checkpointed mid-way resumes to the uninterrupted run's numbers (declared state and the
algorithm's random streams included), SIGKILL + the same command again resumes exactly, and the
hyperparameters are in summary.json."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import vecgossip
from conftest import StopAt, torch_threads, run_of

GOLDEN = Path(__file__).resolve().parent / "golden"
sys.path.insert(0, str(GOLDEN))
import cases  # noqa: E402

NEW = ["choco", "gradient_tracking", "qgdsgdm", "sgp", "el_local", "el_oracle", "adpsgd"]


def overrides(name: str, extra=()) -> list[str]:
    return [*cases.CASES[name], *cases.COMMON, *extra]


def outputs(d: Path) -> dict[str, bytes]:
    return {f: (d / f).read_bytes() for f in ("metrics.csv", "accuracy.npy")}


@pytest.mark.parametrize("name", NEW)
def test_replicas_equal_separate_runs(name, tmp_path):
    cases.register()
    vecgossip.run(vecgossip.compose(overrides=overrides(name, ["replicas=2"])), run_dir=tmp_path / "batch")
    for s in range(2):
        vecgossip.run(vecgossip.compose(overrides=overrides(name, [f"seed={s}"])), run_dir=tmp_path / f"seed{s}")
        assert outputs(tmp_path / "batch" / f"replica{s}") == outputs(tmp_path / f"seed{s}"), f"replica {s}"
    summary = json.loads((tmp_path / "seed0" / "summary.json").read_text())
    assert summary["algorithm"].startswith("vecgossip.algorithms.") and "method_params" in summary


def env() -> dict:
    e = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                          "MASTER_PORT")}
    e.update(OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(GOLDEN), e.get("PYTHONPATH", "")]),
             MPLBACKEND="Agg")
    return e


@pytest.mark.slow   # ~14 s of gloo launches; sharded plug-ins: tests/test_distributed.py and the examples (-m slow)
def test_two_gloo_ranks_equal_one_process(tmp_path):
    """One torchrun launch runs every new baseline sharded 3/3 over 2 ranks."""
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           str(GOLDEN / "run_cases.py"), str(tmp_path / "sharded"), *NEW],
                          env=env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cases.register()
    with torch_threads(1):
        for name in NEW:
            vecgossip.run(vecgossip.compose(overrides=overrides(name)), run_dir=tmp_path / "one" / name)
            assert outputs(tmp_path / "sharded" / name) == outputs(tmp_path / "one" / name), name
            assert json.loads((tmp_path / "sharded" / name / "summary.json").read_text())["shards"]["processes"] == 2


@pytest.mark.parametrize("name", NEW + ["choco_qsgd_faults", "sgp_faults", "el_local_faults"])
def test_checkpointed_run_resumes_exactly(name):
    from vecgossip.composition import rounds, tick
    cases.register()
    cfg = vecgossip.compose(overrides=overrides(name))
    setup = tick if cfg.engine.name == "tick" else rounds
    whole = setup.build_engine(run_of(cfg))
    ref = whole.run(progress=False)
    stop = StopAt(2 if cfg.engine.name == "rounds" else 10)
    first = setup.build_engine(run_of(cfg)).run(progress=False, checkpointer=stop)
    assert first.interrupted and stop.blob is not None
    again = setup.build_engine(run_of(cfg))
    hist = again.run(progress=False, resume=stop.blob)
    assert pd.DataFrame(hist.rows).equals(pd.DataFrame(ref.rows))
    assert np.array_equal(np.stack(hist.acc), np.stack(ref.acc), equal_nan=True)
    assert torch.equal(again.state.theta, whole.state.theta)
    for k, v in whole.state.extra.items():
        assert torch.equal(again.state.extra[k], v), k


def cli(out: Path, extra: list[str], wait: bool = True):
    cmd = [sys.executable, "-m", "vecgossip", "plugins=[golden_plugin]", *overrides("choco", extra),
           f"hydra.run.dir={out}"]
    if not wait:
        return subprocess.Popen(cmd, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    proc = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.slow   # ~12 s; a plug-in's state through kill -9 by default: test_trust_gossip_example.py, test_clock_messages.py
def test_choco_sigkill_then_resume_equals_an_uninterrupted_run(tmp_path):
    long = ["rounds=60", "eval_every=5", "checkpoint_every=1"]
    cli(tmp_path / "ref", long)
    run = tmp_path / "run"
    proc = cli(run, long, wait=False)
    deadline = time.time() + 300
    while not (run / "checkpoint.pt").exists():
        assert proc.poll() is None and time.time() < deadline, "the run ended before its first checkpoint"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert not (run / "summary.json").exists(), "the run finished before the kill: nothing was tested"
    blob = torch.load(run / "checkpoint.pt", weights_only=False)
    assert "x_hat" in blob["engine"]["extra"] and "random" in blob["engine"]["engines"][0]
    cli(run, long)                                       # the same command again resumes
    assert outputs(run) == outputs(tmp_path / "ref")
