"""replicas=S (vecgossip/runtime/replicas.py, engines/group.py): S simulations in one stacked batch give,
replica by replica, exactly the outputs of S separate runs (seed + s, and the s-th value of every
per-replica list); the top level aggregates them; a checkpointed replica batch resumes exactly."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from conftest import StopAt, runs_of
import torch

from conftest import comparable
from test_config import make
from vecgossip.runtime import replicas
from vecgossip.core.errors import ConfigError
from vecgossip.report.tick import report
from vecgossip.composition import tick as tick_setup
from vecgossip.engines.tick.config import t_acq_range
from vecgossip.composition.root import run, validate

WALL = {"wall_seconds", "ticks_per_second"}
# async clock, Dirichlet labels, correction, early stop at a threshold the replicas reach at different ticks
BASE = ["+experiment=vc", "model=mlp", "nodes=10", "degree=4", "t_acq=[1,19]", "alpha=0.5", "max_ticks=400",
        "eval_every=20", "early_stop=true", "engine.threshold=0.5", "progress=false"]


def files(d) -> tuple[bytes, bytes, bytes, dict]:
    s = comparable(json.loads((d / "summary.json").read_text()), tuple(WALL))
    npy = "ticks.npy" if (d / "ticks.npy").exists() else "rounds.npy"
    return (d / "metrics.csv").read_bytes(), (d / "accuracy.npy").read_bytes(), (d / npy).read_bytes(), s


def separate(data_root, tmp_path, overrides, name):
    run(make(overrides + [f"data_root={data_root}"]), tmp_path / name)
    return tmp_path / name


def test_three_replicas_equal_three_separate_runs(data_root, tmp_path):
    top = tmp_path / "batch"
    summary = run(make(BASE + ["replicas=3", f"data_root={data_root}"]), top)
    for s in range(3):
        ref = separate(data_root, tmp_path, BASE + [f"seed={s}"], f"seed{s}")
        got, want = files(top / f"replica{s}"), files(ref)
        assert got[:3] == want[:3], f"replica {s}"
        assert got[3] == want[3], f"replica {s} summary"
    ticks_run = [json.loads((top / f"replica{s}" / "summary.json").read_text())["ticks_run"] for s in range(3)]
    assert len(set(ticks_run)) > 1, "the replicas stopped at one tick: early stop per replica was not exercised"
    # the top level: every replica's rows with a replica column; reach ticks per replica, mean and std
    df = pd.read_csv(top / "metrics.csv")
    for s in range(3):
        part = df[df.replica == s].drop(columns="replica").reset_index(drop=True)
        pd.testing.assert_frame_equal(part, pd.read_csv(top / f"replica{s}" / "metrics.csv"))
    agg = json.loads((top / "summary.json").read_text())
    assert agg["replicas"] == 3 and agg["seeds"] == [0, 1, 2] and summary["replicas"] == 3
    most = [json.loads((tmp_path / f"seed{s}" / "summary.json").read_text())["most_reach_tick"] for s in range(3)]
    assert agg["most_reach_tick"]["values"] == most
    ok = [m for m in most if m is not None]
    assert agg["most_reach_tick"]["defined"] == len(ok)
    if len(ok) > 1:
        mean = sum(ok) / len(ok)
        assert agg["most_reach_tick"]["mean"] == pytest.approx(mean)
        assert agg["most_reach_tick"]["std"] == pytest.approx((sum((m - mean) ** 2 for m in ok) / (len(ok) - 1)) ** 0.5)
    assert agg["ticks_run"]["values"] == ticks_run
    # the report reads the batch as three runs, like the three separate ones
    report(top, tmp_path / "rep_batch")
    report(tmp_path, tmp_path / "rep_all")
    batch = pd.read_csv(tmp_path / "rep_batch" / "runs.csv")
    assert sorted(batch.seed) == [0, 1, 2] and sorted(batch.most_reach_tick.fillna(-1)) == \
        sorted(pd.Series(most, dtype=float).fillna(-1))
    assert len(pd.read_csv(tmp_path / "rep_all" / "runs.csv")) == 6      # batch + the three separate runs


def test_per_replica_values_equal_separate_runs(data_root, tmp_path):
    """beta, compression, t_acq and optim.lr given per replica: replica s runs the s-th values (a
    different lr per replica also splits the training chunks by replica)."""
    base = ["method=tl_compression", "model=mlp", "nodes=8", "degree=4", "max_ticks=60", "eval_every=20",
            "engine.tl.period=20", "progress=false"]
    top = tmp_path / "batch"
    run(make(base + ["replicas=2", "beta=[0.0,0.9]", "compression=[1.0,0.5]", "t_acq=[[1,19],10]",
                     "optim.lr=[0.01,0.05]", f"data_root={data_root}"]), top)
    values = [["seed=0", "beta=0.0", "compression=1.0", "t_acq=[1,19]", "optim.lr=0.01"],
              ["seed=1", "beta=0.9", "compression=0.5", "t_acq=10", "optim.lr=0.05"]]
    for s, v in enumerate(values):
        ref = separate(data_root, tmp_path, base + v, f"seed{s}")
        got, want = files(top / f"replica{s}"), files(ref)
        assert got[:3] == want[:3], f"replica {s}"
        assert got[3] == want[3], f"replica {s} summary"


def test_replica_batch_resumes_exactly(data_root):
    """The replicas' state_dict (the stacked tensors once, each replica's control state) taken
    mid-run and loaded into a fresh batch continues to the uninterrupted run's histories."""
    cfg = make(BASE + ["replicas=2", "early_stop=false", "max_ticks=120", f"data_root={data_root}"])
    cfgs = runs_of(cfg)
    whole = tick_setup.build_replicas(cfgs).run(progress=False)

    stop = StopAt(50)   # keeps the state at position >= 50 and stops there
    first = tick_setup.build_replicas(cfgs).run(progress=False, checkpointer=stop)
    assert first.interrupted and stop.blob["t"] >= 50
    again = tick_setup.build_replicas(cfgs).run(progress=False, resume=stop.blob)
    for a, b in zip(again.parts, whole.parts):
        assert pd.DataFrame(a.rows).equals(pd.DataFrame(b.rows))
        assert np.array_equal(np.stack(a.acc), np.stack(b.acc))
    assert again.rows == whole.rows


def test_replicas_share_one_stack_and_keep_their_blocks(data_root):
    cfgs = runs_of(make(BASE + ["replicas=3", f"data_root={data_root}"]))
    batch = tick_setup.build_replicas(cfgs)
    assert batch.state.theta.shape[0] == 3 * 10
    for s, e in enumerate(batch.engines):   # each engine's state is its block (a view), its init its seed's
        assert e.state.theta.data_ptr() == batch.state.theta[s * 10].data_ptr()
        alone = tick_setup.build_engine(cfgs[s])
        assert torch.equal(e.state.theta, alone.state.theta)


@pytest.mark.parametrize("overrides, match", [
    (["replicas=0"], "replicas"),
    (["replicas=2", "beta=[0.1,0.2,0.3]"], "beta .* 3 values but replicas=2"),
    (["replicas=3", "t_acq=[5,10,20,40]"], "t_acq .* 4 values but replicas=3"),
    (["replicas=2", "beta=[0.1,2.0]"], "beta"),
])
def test_bad_replica_options_fail_fast(overrides, match):
    with pytest.raises(ConfigError, match=match):
        validate(make(overrides), overrides=[])


def test_expand_gives_seed_and_values_per_replica():
    cfgs = replicas.expand(make(["replicas=3", "seed=5", "alpha=[null,0.5,1.0]", "t_acq=[10,[1,19],5]"]))
    assert [c.seed for c in cfgs] == [5, 6, 7] and all(c.replicas == 1 for c in cfgs)
    assert [c.data.alpha for c in cfgs] == [None, 0.5, 1.0]
    assert [c.alpha for c in cfgs] == [None, 0.5, 1.0]
    assert [t_acq_range(c.engine.t_acq) for c in cfgs] == [(10, 10), (1, 19), (5, 5)]
    two = replicas.expand(make(["replicas=2", "t_acq=[1,19]"]))      # a flat pair stays a range
    assert [t_acq_range(c.engine.t_acq) for c in two] == [(1, 19), (1, 19)]


ROUNDS = ["model=mlp", "clients=6", "rounds=2", "local_steps=null", "local_epochs=1", "data.batch_size=256",
          "eval_every=1", "data.global_test_size=100", "alpha=0.5", "progress=false"]


@pytest.mark.parametrize("method, extra", [
    pytest.param("dfedsam", ["topology=random", "degree=2",                          # SAM + momentum, a new graph per round,
                 "clock.enabled=true", "clock.compute.model=lognormal", "clock.links.uplink=20",   # timed: seeds' speeds,
                 "clock.barrier=node"],                       # rows timed after the round they measure
                 marks=pytest.mark.slow),   # ~45 s; round replicas in seconds by default: test_clock_messages.py
    ("fedavg", ["participation=0.5", "optim.lr=[0.1,0.05]"]),           # server; lr per replica
])
def test_round_replicas_equal_separate_runs(data_root, tmp_path, method, extra):
    base = [f"method={method}"] + ROUNDS + [e for e in extra if "[" not in e]
    lists = [e for e in extra if "[" in e]
    top = tmp_path / "batch"
    summary = run(make(base + lists + ["replicas=2", f"data_root={data_root}"]), top)
    assert summary["replicas"] == 2 and summary["engine"] == "rounds"
    for s in range(2):
        mine = [f"{e.split('=')[0]}={e.split('=')[1].strip('[]').split(',')[s]}" for e in lists]
        ref = separate(data_root, tmp_path, base + mine + [f"seed={s}"], f"seed{s}")
        got, want = files(top / f"replica{s}"), files(ref)
        assert got[:3] == want[:3], f"replica {s}"
        assert got[3] == want[3], f"replica {s} summary"
        if "clock.enabled=true" in extra:                # the top level's rows: each replica's, times filled in
            rows = pd.read_csv(top / "metrics.csv")
            assert rows.loc[rows["replica"] == s, "seconds"].tolist() == pd.read_csv(ref / "metrics.csv")["seconds"].tolist()
            assert (top / f"replica{s}" / "clock_nodes.csv").read_bytes() == (ref / "clock_nodes.csv").read_bytes()
    agg = json.loads((top / "summary.json").read_text())
    finals = [json.loads((tmp_path / f"seed{s}" / "summary.json").read_text())["final"]["acc_mean"] for s in range(2)]
    assert agg["final.acc_mean"]["values"] == finals
    assert agg["final.acc_mean"]["mean"] == pytest.approx(sum(finals) / 2)


def test_private_replicas_equal_separate_runs(data_root, tmp_path):
    """DP-SGD (privacy.*) in a replica batch: replica s draws the noise of seed s's streams, so its
    outputs (epsilon and the privacy summary included) are those of the separate run with seed s."""
    base = ["method=dpsgd", "model=mlp", "data=mnist", "clients=8", "topology=ring", "rounds=3", "eval_every=1",
            "data.global_test_size=100", "data.local_test_size=10", "privacy.noise_multiplier=1.0", "progress=false"]
    top = private_replicas_equal_separate_runs(data_root, tmp_path, base)
    assert files(top / "replica0")[0] != files(top / "replica1")[0]


@pytest.mark.slow   # ~28 s; private replicas by default: the round engine's (test_private_replicas_equal_separate_runs)
def test_private_tick_replicas_equal_separate_runs(data_root, tmp_path):
    """The same on the tick engine (asynchronous T_acq, Dirichlet labels, early stop)."""
    base = BASE + ["privacy.noise_multiplier=1.0", "max_ticks=100"]
    private_replicas_equal_separate_runs(data_root, tmp_path, base)


def private_replicas_equal_separate_runs(data_root, tmp_path, base: list[str]):
    """replicas=2 of ``base`` against the separate runs of seeds 0 and 1: the same files, a private
    summary; returns the batch's folder."""
    return replicas_equal_separate_runs(data_root, tmp_path, base, lambda s: s["privacy"]["epsilon"]["max"] > 0)


def replicas_equal_separate_runs(data_root, tmp_path, base: list[str], check):
    """replicas=2 of ``base`` against the separate runs of seeds 0 and 1: the same files, and
    ``check(summary)`` holds; returns the batch's folder."""
    top = tmp_path / "batch"
    run(make(base + ["replicas=2", f"data_root={data_root}"]), top)
    for s in range(2):
        ref = separate(data_root, tmp_path, base + [f"seed={s}"], f"seed{s}")
        got, want = files(top / f"replica{s}"), files(ref)
        assert got[:3] == want[:3], f"replica {s}"
        assert got[3] == want[3] and check(got[3]), f"replica {s} summary"
    return top


@pytest.mark.slow   # ~34 s; timed tick replicas by default: test_clock_messages.py (a user's algorithm)
def test_timed_tick_replicas_equal_separate_runs(data_root, tmp_path):
    """The tick engine in seconds (clock.*): each replica draws its seed's speeds and links; every
    replica's files equal its separate run's (messages in flight across windows, lognormal steps)."""
    base = ["method=vc", "model=mlp", "nodes=10", "degree=4", "max_ticks=60", "eval_every=20", "progress=false",
            "clock.enabled=true", "clock.compute.model=lognormal", "clock.compute.seconds=2", "clock.compute.sigma=0.2",
            "clock.links.uplink=5", "clock.links.latency=0.3"]
    replicas_equal_separate_runs(data_root, tmp_path, base, lambda s: s["clock"]["messages_received_mean"] > 0)
