"""The docs' worked attack (examples/attacks/my_attacks.py, issue 49): a user's attack with options of
its own (adversary.params, checked against its Params) and a global view (every honest model of
the step), run as a user runs it (its module on the path, chosen by dotted path). What each
Byzantine link carries equals its definition computed with numpy from every honest model, on the
tick engine's buffers and the round engine's gather alike; the CLI runs it, and refuses an option
it does not take in one line (exit 2)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from test_services import round_engine, tick_engine

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "attacks"
F64 = torch.float64


@pytest.fixture(autouse=True)
def example_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))


def collude(x: np.ndarray, byzantine: list[int], scale: float, seed: int) -> np.ndarray:
    """The definition: the honest models' mean moved scale x (their mean distance to it) along the
    unit direction of seed's standard normal draw."""
    honest = [i for i in range(x.shape[0]) if i not in byzantine]
    flat = x.reshape(x.shape[0], -1)
    mean = flat[honest].mean(0)
    spread = np.mean([np.linalg.norm(flat[i] - mean) for i in honest])
    u = torch.randn(mean.shape, generator=torch.Generator().manual_seed(seed), dtype=F64).numpy()
    return (mean + scale * spread * u / np.linalg.norm(u)).reshape(x.shape[1:])


def test_collude_on_the_tick_engine_fills_buffers_as_its_definition():
    e = tick_engine(["degree=4", "adversary.nodes=[1,4]", "adversary.attack=my_attacks.Collude",
                     "+adversary.params.scale=2.5", "+adversary.params.seed=7"])
    e.state.theta.copy_(torch.randn(e.state.theta.shape, generator=torch.Generator().manual_seed(2), dtype=F64))
    x = e.state.theta.clone().numpy()
    forged = collude(x, [1, 4], 2.5, 7)
    e.transport.send(np.arange(6), None, 1)
    a = e.wiring.a_full.toarray()
    want = np.array([sum(forged if j in (1, 4) else x[j] for j in range(6) if a[i, j]) for i in range(6)])
    assert a[:, [1, 4]].sum() > 0
    assert np.allclose(e.buffers.total.numpy(), want, rtol=1e-12, atol=1e-12)


def test_collude_on_the_round_engine_sends_its_definition_to_every_receiver():
    e = round_engine(["method=dpsgd", "topology=exponential", "clients=8", "adversary.nodes=[2,5]",
                      "adversary.attack=my_attacks.Collude", "+adversary.params.scale=3"])
    e.online = np.ones(8, dtype=bool)
    x = torch.randn(8, 3, 4, generator=torch.Generator().manual_seed(5), dtype=F64)
    blocks = []
    e.gather(x, 1, lambda b: blocks.append(b) or b.own)
    forged = collude(x.numpy(), [2, 5], 3.0, 0)
    checked = 0
    for b in blocks:
        for r in range(b.msgs.shape[0]):
            for k in range(b.msgs.shape[1]):
                j = int(b.senders[r, k])
                if b.mask[r, k] and j in (2, 5) and b.receivers[r] not in (2, 5):
                    assert np.allclose(b.msgs[r, k].numpy(), forged, atol=1e-12)
                    checked += 1
    assert checked >= 4


def cli(tmp_path, *extra):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLE), os.environ.get("PYTHONPATH", "")]),
           "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, "-m", "vecgossip", "method=dpsgd", "model=mlp", "clients=8",
                           "topology=exponential", "rounds=2", "eval_every=1", "data.global_test_size=50",
                           "data.local_test_size=10", "adversary.nodes=2", "adversary.attack=my_attacks.Collude",
                           "progress=false", f"hydra.run.dir={tmp_path}", *extra],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def test_the_cli_runs_the_example_and_refuses_an_option_it_does_not_take(tmp_path, data_root):
    ok = cli(tmp_path / "ok", "+adversary.params.scale=3", f"data_root={data_root}")
    assert ok.returncode == 0, ok.stderr[-2000:]
    summary = json.loads((tmp_path / "ok" / "summary.json").read_text())
    assert summary["config"]["adversary"]["params"] == {"scale": 3}
    bad = cli(tmp_path / "bad", "+adversary.params.scal=3", f"data_root={data_root}")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "adversary.params.scal" in bad.stderr and "scale" in bad.stderr and "seed" in bad.stderr
