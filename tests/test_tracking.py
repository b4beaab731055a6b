"""logger=tensorboard: the event file holds every metrics row as scalars at its tick/round and the
config as text (read back with TensorBoard's own reader); a resumed run writes each step once."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from test_config import REPO
from test_resume import cli, finish

pytest.importorskip("tensorboard", reason="pip install -e '.[test]' installs it")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402


def run(args, out, data_root) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vecgossip", *args, "logger=tensorboard", "progress=false",
                           f"data_root={data_root}", f"hydra.run.dir={out}"], cwd=REPO, capture_output=True,
                          text=True, timeout=600)


def events(out) -> EventAccumulator:
    acc = EventAccumulator(str(out / "tb"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


@pytest.mark.parametrize("engine,args,step", [
    ("tick", ["+experiment=vc", "model=mlp", "nodes=6", "degree=3", "max_ticks=60", "early_stop=false"], "tick"),
    ("rounds", ["method=dfedavg", "model=mlp", "clients=4", "topology=ring", "rounds=6", "local_steps=2",
                "local_epochs=null", "eval_every=2", "data.global_test_size=100"], "round"),
])
def test_tensorboard_scalars_equal_metrics_csv(engine, args, step, tmp_path, data_root):
    proc = run(args, tmp_path, data_root)
    assert proc.returncode == 0, proc.stderr[-2000:]
    metrics = pd.read_csv(tmp_path / "metrics.csv")
    acc = events(tmp_path)
    assert "acc_mean" in acc.Tags()["scalars"]
    got = acc.Scalars("acc_mean")
    assert [e.step for e in got] == metrics[step].tolist()
    assert [e.value for e in got] == pytest.approx(metrics.acc_mean.tolist(), rel=1e-6)
    text = acc.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "model:" in text and "mlp" in text


@pytest.mark.slow   # ~28 s: a resumed run's tracker; the scalars themselves are checked by default above
def test_tensorboard_after_resume_has_each_step_once(tmp_path, data_root):
    """SIGTERM after the first checkpoint, then the same command: the events of the interrupted
    process are purged from the resumed step on, every tick appears once, values as in metrics.csv."""
    args = ["+experiment=vc", "model=mlp", "nodes=8", "degree=4", "max_ticks=1500", "early_stop=false",
            "checkpoint_every=50", "logger=tensorboard"]
    proc = cli(args, tmp_path, data_root)
    deadline = time.time() + 300
    while not (tmp_path / "checkpoint.pt").exists():
        assert proc.poll() is None and time.time() < deadline, "run ended before its first checkpoint"
        time.sleep(0.05)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    assert finish(proc).returncode == 130 and not (tmp_path / "summary.json").exists()
    again = finish(cli(args, tmp_path, data_root))
    assert again.returncode == 0, again.stderr[-2000:]
    metrics = pd.read_csv(tmp_path / "metrics.csv")
    got = events(tmp_path).Scalars("acc_mean")
    assert [e.step for e in got] == metrics.tick.tolist()
    assert [e.value for e in got] == pytest.approx(metrics.acc_mean.tolist(), rel=1e-6)
