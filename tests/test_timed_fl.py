"""Timed federated learning (issue 55): a server's rounds in virtual seconds, its links timed like
any node's, and FedBuff (Nguyen et al. 2022), the asynchronous FL baseline, against its
event-by-event, client-by-client twin (tests/reference/fedbuff.py). Expected times are computed by
hand from the setting: K = 1 local step of c = 0.05 s, client links 10 Mbit/s, the server's
20 Mbit/s, latency 1 ms, M = the MLP's float32 bytes (50,890 parameters x 4)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import reference.fedbuff
import vecgossip
from test_rounds import engine_for, fake_data, twin_inputs  # noqa: F401 (fake_data: a fixture)
from vecgossip.core.errors import ConfigError

M = 50_890 * 4
C, LAT = 0.05, 0.001
BASE = ["model=mlp", "data=mnist", "clients=4", "rounds=2", "eval_every=1", "local_steps=1", "local_epochs=null",
        "data.global_test_size=100", "data.local_test_size=10", "progress=false", "clock.enabled=true",
        f"clock.compute.seconds={C}", "clock.links.uplink=10", f"clock.links.latency={LAT}"]


def test_a_fedavg_round_times_downloads_work_and_uploads_over_the_servers_links(tmp_path, data_root):
    """4 participants; the server's 20 Mbit/s (2.5 MB/s) is the bottleneck both ways (each client
    10 Mbit/s): 4 downloads share its uplink (M / (2.5e6 / 4) each), then c, then 4 uploads share
    its downlink: a round is 2 x 4 M / 2.5e6 + c + 2 x latency. Each client sends one model a
    round, the server four."""
    res = vecgossip.run(overrides=[*BASE, "method=fedavg", "engine.participation=1", "clock.links.server=20",
                                   f"data_root={data_root}"], run_dir=tmp_path / "fedavg")
    per_round = 2 * 4 * M / 2.5e6 + C + 2 * LAT
    np.testing.assert_allclose(res.metrics["seconds"], [0, per_round, 2 * per_round], rtol=1e-12)
    clock = res.summary["clock"]
    assert clock["server"]["bytes_sent"] == pytest.approx(2 * 4 * M, rel=1e-12)
    assert clock["busy_mean"] == pytest.approx(2 * C, rel=1e-12)


def test_a_client_leaving_mid_round_is_cut_off_and_not_averaged(tmp_path, data_root):
    """Client 2 goes offline 0.1 s into the first round (diurnal churn with its phase set), while
    the four downloads share the server's uplink (625 kB/s each): its download is aborted there
    and the other three, 62,500 B in, get 2.5e6 / 3 B/s each for the rest. They compute, upload
    three ways, and the round ends without client 2, which is not averaged."""
    from conftest import run_of
    from vecgossip.composition.rounds import build_engine
    cfg = vecgossip.compose(overrides=[*BASE, "method=fedavg", "engine.participation=1", "clock.links.server=20",
                                       "rounds=1", "clock.churn.model=diurnal", "clock.churn.day=1000",
                                       "clock.churn.availability=0.5", f"data_root={data_root}"])
    engine = build_engine(run_of(cfg))
    ch = engine.timer.churn
    ch.phase[:] = 0.0                     # everyone online for the first 500 s ...
    ch.phase[2] = 0.5 - 0.1 / 1000        # ... but client 2, which leaves at 0.1 s
    theta0 = engine.state.theta.clone()
    engine.run(progress=False)
    down = 0.1 + 3 * (M - 0.1 * 2.5e6 / 4) / 2.5e6 + LAT        # 0.270272 s
    assert engine.timer.seconds == pytest.approx(down + C + 3 * M / 2.5e6 + LAT, rel=1e-12)
    assert engine.timer.busy[2] == 0 and engine.timer.bytes_sent[2] == 0
    assert engine.timer.server_bytes == pytest.approx(3 * M, rel=1e-12)     # client 2's download was aborted
    # the server averaged clients 0, 1, 3 only: client 2's trained model is not in it
    assert not torch.equal(engine.state.theta[2], theta0[2])


@pytest.mark.parametrize("staleness", ["sqrt", "none"])
def test_fedbuff_matches_its_event_by_event_twin(fake_data, staleness):  # noqa: F811 (the fixture)
    """6 clients of lognormal speed, 3 in flight, a server step every 2 uploads, 5 steps, in
    float64: the engine (clients of one version trained in one batch, the clock's transfers) and
    the twin (a plain event heap, one module per client) agree on every step's time, on who
    arrived from which version, and on the server's model to 1e-11."""
    cfg, engine = engine_for("fedbuff", ["rounds=5", "local_steps=2", "local_epochs=null", "algorithm.buffer=2",
                                         "algorithm.concurrency=3", f"algorithm.staleness={staleness}",
                                         "clock.compute.model=lognormal", "clock.links.latency=0.01"], torch.float64)
    engine.state.extra = {k: v.to(torch.float64) for k, v in engine.state.extra.items()}
    init = engine.state.theta.clone()
    sampler, _ = twin_inputs(engine)
    arrivals = []
    original = engine.asynchronous_round

    def spy(buffer, concurrency):
        up = original(buffer, concurrency)
        arrivals.append(list(zip(up.arrived.tolist(), up.versions.tolist())))
        return up
    engine.asynchronous_round = spy
    hist = engine.run(progress=False)
    want, times, log = reference.fedbuff.run(cfg, engine, sampler, init, engine.timer.step_seconds, 5)
    assert arrivals == log
    assert any(t - v > 0 for t, a in enumerate(log) for _, v in a)          # some uploads were stale
    np.testing.assert_allclose([r["seconds"] for r in hist.rows[1:]], times, rtol=1e-12)
    got = engine.global_model[0]
    assert ((got - want).norm() / want.norm()).item() <= 1e-11
    assert (got - init[0]).norm() > 1e-3 * init[0].norm()               # it really trained


def test_fedbuff_needs_the_clock_and_fits_the_clients(tmp_path, data_root):
    base = ["method=fedbuff", "model=mlp", "data=mnist", "clients=4", "progress=false", f"data_root={data_root}"]
    with pytest.raises(ConfigError, match="runs in virtual seconds only .* set clock.enabled=true"):
        vecgossip.compose(overrides=[*base, "clients=40", "clock.enabled=false"])
    with pytest.raises(ConfigError, match=r"algorithm.concurrency=10 and algorithm.buffer=5 must be at most clients=4"):
        vecgossip.run(overrides=base, run_dir=tmp_path / "x")


FEDBUFF = ["method=fedbuff", "model=mlp", "data=mnist", "clients=8", "rounds=6", "eval_every=2", "local_steps=2",
           "local_epochs=null", "algorithm.buffer=2", "algorithm.concurrency=4", "data.global_test_size=100",
           "data.local_test_size=10", "progress=false", "clock.compute.model=lognormal", "clock.links.uplink=10",
           "clock.links.server=20", "clock.links.latency=0.001"]


def test_fedbuff_as_replicas_equals_separate_runs(tmp_path, data_root):
    from test_clock_messages import same_files, user_cli
    user_cli(tmp_path / "both", [*FEDBUFF, "replicas=2"], data_root)
    for s in (0, 1):
        user_cli(tmp_path / f"seed{s}", [*FEDBUFF, f"seed={s}"], data_root)
        same_files(tmp_path / "both" / f"replica{s}", tmp_path / f"seed{s}")


@pytest.mark.slow   # kill -9 and resume through the CLI (python -m pytest -m slow)
def test_fedbuff_killed_and_resumed_equals_an_uninterrupted_run(tmp_path, data_root):
    """The asynchronous server's transfers, computes and draws in flight are checkpointed: kill -9
    after a checkpoint and the same command again give the uninterrupted run's bits."""
    from conftest import kill_at_first_checkpoint
    from test_clock_messages import same_files, user_cli
    args = [*FEDBUFF, "rounds=80", "checkpoint_every=1"]
    user_cli(tmp_path / "ref", args, data_root)
    run = tmp_path / "run"
    kill_at_first_checkpoint(user_cli(run, args, data_root, wait=False), run)
    user_cli(run, args, data_root)
    same_files(tmp_path / "ref", run)
