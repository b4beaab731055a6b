"""The run's last state is evaluated whatever eval_every is (issue 58, item 1): summary.json's
``final_*`` figures describe the models the run ended with, not the last multiple of eval_every.
Tick engine: rows at the eval ticks and at tick max_ticks - 1; round engine: after the last round."""
from __future__ import annotations

import pandas as pd
import torch

import vecgossip
from test_guard import guarded_engine
from test_resume import StopAt

TICK = ["method=gossip", "model=mlp", "data=mnist", "nodes=8", "degree=2", "max_ticks=15", "eval_every=15",
        "data.local_eval_size=100", "progress=false"]


def test_a_tick_run_measures_its_last_state(tmp_path, data_root):
    """15 ticks, an evaluation every 15: tick 0 (the untrained models) and tick 14 (the end); the
    final accuracy is tick 14's, and it has moved from the untrained one."""
    res = vecgossip.run(overrides=[*TICK, f"data_root={data_root}"], run_dir=tmp_path / "run")
    assert res.metrics["tick"].tolist() == [0, 14]
    assert res.summary["final_acc_mean"] == res.metrics["acc_mean"].iloc[-1] != res.metrics["acc_mean"].iloc[0]


def test_replicas_measure_their_last_state(tmp_path, data_root):
    vecgossip.run(overrides=[*TICK, "replicas=2", f"data_root={data_root}"], run_dir=tmp_path / "two")
    for s in range(2):
        df = pd.read_csv(tmp_path / "two" / f"replica{s}" / "metrics.csv")
        assert df["tick"].tolist() == [0, 14], s


def test_a_resumed_run_measures_its_last_state_once():
    """Cut at tick 25 of 33 (eval every 10: rows 0, 10, 20, 30 and the end, 32) and resumed: the
    same rows and models as the uninterrupted run, the final row once."""
    ref = guarded_engine("stop", max_ticks=33)
    want = ref.run(progress=False)
    assert [r["tick"] for r in want.rows] == [0, 10, 20, 30, 32]
    first, cut = guarded_engine("stop", max_ticks=33), StopAt(25)
    first.run(progress=False, checkpointer=cut)
    second = guarded_engine("stop", max_ticks=33)
    got = second.run(progress=False, resume=cut.saved)
    assert got.rows == want.rows and torch.equal(second.state.theta, ref.state.theta)


def test_a_run_that_ends_on_an_evaluation_has_no_second_final_row():
    hist = guarded_engine("stop", max_ticks=31).run(progress=False)
    assert [r["tick"] for r in hist.rows] == [0, 10, 20, 30]


def test_a_round_run_measures_its_last_round(tmp_path, data_root):
    res = vecgossip.run(overrides=["method=dpsgd", "model=mlp", "data=mnist", "clients=4", "topology=ring", "rounds=3",
                                   "eval_every=2", "data.global_test_size=100", "data.local_test_size=10",
                                   "progress=false", f"data_root={data_root}"], run_dir=tmp_path / "rounds")
    assert res.metrics["round"].tolist() == [0, 2, 3]
    assert res.summary["final"]["acc_mean"] == res.metrics["acc_mean"].iloc[-1]
