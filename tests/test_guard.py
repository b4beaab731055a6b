"""The divergence guard (guard.py): NaN/inf injected into one node's parameters, both policies, both
engines. Under ``isolate`` the node stops training and sending and nobody ever receives its NaN;
under ``stop`` the run ends within the step, with outputs written and exit code 3 on the CLI."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import synthetic_dataset
from test_config import REPO
from test_rounds import engine_for, fake_data  # noqa: F401  (fixture)
from settings import TickSetting, tick_engine
from vecgossip.engines.tick.engine import NEVER, TickEngine
from vecgossip.core.guard import nonfinite_rows
from vecgossip.models import get_model, make_forward
from vecgossip.core.optim import SGDConfig
from vecgossip.network.peers import Links
from vecgossip.core.state import Layout, init_theta, new_state
from vecgossip.network.topology import random_regular


def guarded_engine(policy: str, t_acq=(1, 3), **setting) -> TickEngine:
    """An MLP engine on 8 nodes (``setting``: more of the TickSetting, e.g. R, compression)."""
    graph = random_regular(8, 3, 2)
    data = synthetic_dataset(200)
    layout = Layout.of(get_model("mlp").factory())
    theta = init_theta(layout, 8, "caffe_xavier", torch.Generator().manual_seed(0))
    cfg = TickSetting(**{**dict(t_acq=t_acq, beta=0.0, correction=True, batch_size=8, max_ticks=60, eval_every=10,
                                on_divergence=policy), **setting})
    return tick_engine(cfg, new_state(layout, theta), Links(graph), make_forward("mlp"), SGDConfig(), data, None,
                      data.images[:20].float(), data.labels[:20], torch.Generator().manual_seed(0),
                      np.random.default_rng(0))


def test_nonfinite_rows_one_reduction():
    x = torch.randn(5, 7)
    x[1, 3], x[4, 0] = float("nan"), float("inf")
    assert nonfinite_rows(x).tolist() == [1, 4]
    assert nonfinite_rows(x, torch.tensor([0, 4, 2])).tolist() == [1]
    x[2, 2] = 3e38                                                  # finite, but the row sum overflows: diverging
    x[2, 5] = 3e38
    assert nonfinite_rows(x).tolist() == [1, 2, 4]


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_tick_isolate_keeps_neighbours_finite(bad):
    eng = guarded_engine("isolate")
    eng.state.theta[3, 5] = bad                                     # node 3 trains at tick 0 with it
    hist = eng.run(progress=False)
    assert hist.diverged is None and hist.ticks_run == 60
    assert eng.diverged.tolist() == [i == 3 for i in range(8)]
    assert eng.next_train[3] == NEVER and not eng.links.active[3].any()
    others = torch.cat([eng.state.theta[:3], eng.state.theta[4:]])
    assert torch.isfinite(others).all() and torch.isfinite(eng.buffers.total[[0, 1, 2, 4, 5, 6, 7]]).all()
    assert eng.t_first_average is not None and eng.state.iters[[0, 1, 2, 4, 5, 6, 7]].min() > 10
    assert all(r["nodes_diverged"] == 1 and np.isfinite(r["acc_mean"]) for r in hist.rows)
    assert np.isnan(np.stack(hist.acc)[:, 3]).all() and not np.isnan(np.stack(hist.acc)[:, [0, 7]]).any()
    for r, a in zip(hist.rows, hist.acc):            # node 3 counts as accuracy 0, never hidden (issue 39)
        assert r["acc_min"] == 0 and r["acc_mean"] == pytest.approx(np.nan_to_num(a).sum() / 8)
        assert r["acc_max"] == np.nanmax(a)


def test_tick_stop_ends_within_the_tick():
    eng = guarded_engine("stop", t_acq=(10, 10))
    eng.state.theta[5, 0] = float("nan")                            # every node trains at tick 0
    hist = eng.run(progress=False)
    assert hist.diverged["tick"] == 0 and hist.diverged["nodes"] == [5] and hist.ticks_run == 0
    assert torch.isfinite(eng.buffers.total).all()                  # nothing was sent
    assert hist.rows[-1]["nodes_diverged"] == 1


def test_round_isolate_leaves_the_graph(fake_data):  # noqa: F811
    cfg, eng = engine_for("dfedavgm", ["topology=ring", "local_steps=2", "local_epochs=null", "rounds=3",
                                       "on_divergence=isolate"])
    eng.state.theta[2, 0] = float("nan")
    hist = eng.run(progress=False)
    assert hist.diverged is None and eng.diverged.tolist() == [i == 2 for i in range(6)]
    keep = [0, 1, 3, 4, 5]
    assert torch.isfinite(eng.state.theta[keep]).all()
    w = eng.mixing.at(1)[2].toarray()
    assert w[2, 2] == 1 and w[2].sum() == 1 and (w[[1, 3], 2] == 0).all()      # out of the mixing
    np.testing.assert_allclose(w.sum(0), 1)
    assert all(r["clients_diverged"] == 1 and np.isfinite(r["acc_mean"]) for r in hist.rows[1:])
    assert np.isfinite(hist.rows[-1]["consensus_distance"])
    for r, a in zip(hist.rows[1:], hist.acc[1:]):     # client 2 counts as accuracy 0 (issue 39)
        assert np.isnan(a[2]) and r["acc_min"] == 0 and r["acc_mean"] == pytest.approx(np.nan_to_num(a).sum() / 6)


def test_round_stop(fake_data):  # noqa: F811
    cfg, eng = engine_for("dfedsam", ["topology=ring", "local_steps=2", "local_epochs=null"])
    eng.state.theta[4, 0] = float("inf")
    hist = eng.run(progress=False)
    assert hist.diverged["round"] == 0 and hist.diverged["nodes"] == [4] and hist.rounds_run == 0


def test_cli_stop_writes_outputs_and_exits_3(data_root, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "vecgossip", "method=gossip", "model=mlp", "nodes=6", "degree=3", "optim.lr=1e38",
                           "max_ticks=50", f"data_root={data_root}", f"hydra.run.dir={tmp_path}", "progress=false"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    assert "node(s) diverged (non-finite parameters) at tick 0" in proc.stderr and "outputs written" in proc.stderr
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["diverged"]["tick"] == 0 and len(s["diverged"]["nodes"]) == 6
    assert (tmp_path / "metrics.csv").exists() and (tmp_path / "accuracy.png").exists()


def test_a_sweep_runs_on_past_a_diverged_job_then_exits_3(data_root, tmp_path):
    """-m: a job that diverges is a result (outputs written); the sweep's next jobs still run, and
    the sweep ends with exit code 3 naming the jobs that diverged."""
    proc = subprocess.run([sys.executable, "-m", "vecgossip", "-m", "method=gossip", "model=mlp", "nodes=6", "degree=3",
                           "optim.lr=1e38,0.01", "max_ticks=20", f"data_root={data_root}", "progress=false",
                           f"hydra.sweep.dir={tmp_path}"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    assert json.loads((tmp_path / "0" / "summary.json").read_text())["diverged"]["tick"] == 0
    last = pd.read_csv(tmp_path / "0" / "metrics.csv").iloc[-1]        # diverged nodes count as 0, not hidden
    assert last.acc_mean == 0 and last.acc_min == 0 and last.nodes_diverged == 6
    assert json.loads((tmp_path / "1" / "summary.json").read_text()).get("diverged") is None   # job 1 ran
    assert f"1 job(s) of the sweep diverged (outputs written): {tmp_path / '0'}" in proc.stderr
    # issue 39: a start line per job (which job of how many, what, where), on the console and in __main__.log
    start = f"sweep {tmp_path}, job 1 (2 of 2): starting baseline: method=gossip (6 nodes, 20 ticks at most) on cpu, memory estimate"
    assert start in proc.stdout and start in (tmp_path / "1" / "__main__.log").read_text()


@pytest.mark.parametrize("overrides,warned", [
    (["method=dfedsam", "model=lenet"], "optim.lr=0.1 with optim.momentum=0.9 is an SGD step lr / (1 - momentum) of 1,"),
    (["method=dfedavgm", "model=lenet", "replicas=2", "optim.lr=[0.01,0.1]"], "optim.lr=0.1 with optim.momentum=0.9"),
    (["method=dfedsam", "model=lenet", "optim.lr=0.03"], None),          # a step of 0.3: what trained
    (["method=dpsgd", "model=lenet"], None),                             # 0.1 without momentum
    (["method=dfedsam", "model=cnn", "data=cifar10"], None),             # paper 2's setting: not measured to diverge
    (["method=vc", "model=lenet"], None),                                # the tick engine's Caffe solver
])
def test_a_step_known_to_diverge_is_warned_at_the_start(overrides, warned):
    """Issue 39: DFedSAM / DFedAvgM at lr 0.1 with momentum 0.9 on LeNet diverged on 3-5 of 8
    clients in round 1 (results/lr_cpu/); such a run starts with one warning line naming the options
    as typed and a step that trained, for every replica's lr; the others start silently."""
    from conftest import runs_of
    from vecgossip.config import rules
    import vecgossip
    lines = [line for run in runs_of(vecgossip.compose(overrides=overrides)) for line in rules.cautions(run)]
    if warned is None:
        assert lines == []
    else:
        assert len(set(lines)) == 1 and lines[0].startswith(warned) and "\n" not in lines[0]
        assert lines[0].endswith("optim.lr=0.03 is within it")


def test_the_warning_is_on_the_console_and_in_the_log(data_root, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "vecgossip", "method=dfedavgm", "model=lenet", "clients=2",
                           "topology=complete", "rounds=1", "local_steps=1", "local_epochs=null",
                           "data.global_test_size=100", "data.local_test_size=20", f"data_root={data_root}",
                           f"hydra.run.dir={tmp_path}", "progress=false"], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = "[WARNING] - optim.lr=0.1 with optim.momentum=0.9 is an SGD step lr / (1 - momentum) of 1, above the 0.3"
    assert line in proc.stdout and line in (tmp_path / "__main__.log").read_text()


class Inject:
    """A checkpointer stand-in: at the first position it is called at (or after) ``at``, NaN goes
    into node ``node``'s parameters; it records every position it is called at and whether the
    guard held unread flags then."""

    def __init__(self, group, at: int, node: int) -> None:
        self.group, self.at, self.node, self.calls = group, at, node, []

    def step(self, pos, end, hist, wall, state_fn):
        self.calls.append((pos, self.group.watch.pending))
        if pos >= self.at and self.at >= 0:
            self.group.state.theta[self.node, 0] = float("nan")
            self.at = -1
        return False


@pytest.mark.parametrize("every", [1, 5])
def test_a_periodic_guard_stops_at_its_next_read(every):
    """engine.guard_every=5 (what a GPU's auto does under on_divergence=stop: a read at each
    evaluation): the non-finite rows are noted on the device and read every 5th tick; the run stops
    there. In between the NaN node kept sending, so the neighbours that averaged it are named with
    it (the price of reading less often); engine.guard_every=1 names it alone, at the tick it
    trained. The run loop checkpoints only where the guard holds no unread flag (so a kept
    checkpoint never holds an unseen NaN)."""
    from vecgossip.engines.group import Group
    from vecgossip.engines.loop import run_loop
    from vecgossip.engines.tick.clock import TickClock
    eng = guarded_engine("stop")
    eng.cfg = eng.cfg.model_copy(update={"guard_every": every})
    neighbours = set(eng.links.targets[6][eng.links.planned[6]].tolist())
    group = Group([eng])
    clock = TickClock(group)
    assert clock.guard_every == every and (group.watch is not None) == (every > 1)
    inject = Inject(group, 1, 6) if every > 1 else None
    if every == 1:                       # the same node, through the engine's own first tick
        eng.state.theta[6, 0] = float("nan")
    hist = run_loop(group, clock, progress=False, checkpointer=inject)
    caught = hist.diverged["nodes"]
    if every == 1:
        assert caught == [6] and hist.diverged["tick"] == 0
        return
    assert 6 in caught and set(caught) <= neighbours | {6} and len(caught) > 1
    assert hist.diverged["tick"] == 5 and hist.ticks_run == 5
    assert inject.calls and not any(pending for _, pending in inject.calls)
    assert len(inject.calls) <= 5                               # one per read at most


def test_isolate_reads_the_guard_every_tick():
    """Under isolate the guard is read every tick whatever the device (auto), and a sparser read is
    refused in one line: a late isolation spreads the NaN through the receivers' buffers."""
    import vecgossip
    from vecgossip.core.device import force_gpu_paths
    from vecgossip.core.errors import ConfigError
    from vecgossip.engines.group import Group
    from vecgossip.engines.tick.clock import TickClock
    with force_gpu_paths():
        eng = guarded_engine("isolate")
        assert TickClock(Group([eng])).guard_every == 1
        eng = guarded_engine("stop")
        assert TickClock(Group([eng])).guard_every == eng.cfg.eval_every
    with pytest.raises(ConfigError, match="engine.guard_every=5 with on_divergence=isolate"):
        vecgossip.compose(overrides=["engine.guard_every=5", "on_divergence=isolate"])


def test_a_periodic_guard_resumes_exactly():
    """Checkpoints at the guard's reads only; a run cut at one and resumed ends bitwise where the
    uninterrupted one does (asynchronous ticks, compressed sends, R = 4)."""
    from test_resume import StopAt

    def engine():
        e = guarded_engine("stop", t_acq=(1, 5), compression=0.3, max_ticks=120, R=4)
        e.cfg = e.cfg.model_copy(update={"guard_every": 5})
        return e
    ref = engine()
    ref_hist = ref.run(progress=False)
    first = engine()
    cut = StopAt(43)
    first.run(progress=False, checkpointer=cut)
    at = cut.saved["t"]
    second = engine()
    hist = second.run(progress=False, resume=cut.saved)
    assert 43 <= at < 120
    assert torch.equal(second.state.theta, ref.state.theta) and torch.equal(second.buffers.total, ref.buffers.total)
    assert hist.rows == ref_hist.rows
