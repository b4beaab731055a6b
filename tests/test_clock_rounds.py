"""The round engine in virtual seconds (clock.enabled, issue 48): a barrier round checked against
the plain per-event twin (tests/reference/clock.py) on random cases, a whole D-PSGD run against the
closed form r (c K + k M / B) computed by hand, learning untouched by the clock, and the clock
options refused in one line (exit 2)."""
from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pandas as pd
import torch
import pytest
import scipy.sparse as sp

import vecgossip
from reference import clock as twin
from test_config import REPO, make
from vecgossip.composition.root import validate
from vecgossip.core.errors import ConfigError
from vecgossip.engines.clock.rounds import RoundTimer, synchronous_round


def twin_round(compute, edges, size, up, down, lat, policy):
    """The per-event twin's deliveries of the round's messages (each starts when its sender's
    compute ends), then the barrier: every node's compute end and last arrival."""
    starts = [{"time": float(compute[s]), "sender": s, "receiver": r, "size": float(size[e]),
               "latency": float(lat[s, r]), "tag": e} for e, (s, r) in enumerate(edges)]
    order = sorted(range(len(starts)), key=lambda e: (starts[e]["time"], e))   # start order: time, then edge
    got = twin.simulate([starts[e] for e in order], up, down, policy)
    done = np.array(compute, float)
    for t, tag in got:
        r = edges[tag][1]
        done[r] = max(done[r], t)
    return done


@pytest.mark.parametrize("policy", ["fair", "fifo"])
@pytest.mark.parametrize("seed", range(5))
def test_a_barrier_round_equals_the_per_event_twin(policy, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 9))
    compute = np.round(rng.uniform(0, 2, n), 1) * (rng.uniform(size=n) > 0.2)
    edges = [(int(s), int(r)) for s in range(n) for r in range(n) if s != r and rng.uniform() < 0.4]
    size = rng.choice([0.0, 3.0, 10.0, 25.0], len(edges))
    up = np.array([x if x > 1 else math.inf for x in rng.uniform(0, 10, n)])
    down = np.array([x if x > 1 else math.inf for x in rng.uniform(0, 10, n)])
    lat = np.round(rng.uniform(0, 0.3, (n, n)), 2)
    np.fill_diagonal(lat, 0)
    s, r = (np.array([e[i] for e in edges], dtype=np.int64) for i in (0, 1))
    duration, done = synchronous_round(compute, s, r, size, up, down, lat, policy)
    want = twin_round(compute, edges, size, list(up), list(down), lat, policy)
    assert len(edges) > 2
    np.testing.assert_allclose(done, want, rtol=1e-9, atol=1e-12)
    assert duration == pytest.approx(want.max(), rel=1e-12)


def test_a_straggler_and_a_slow_uplink_by_hand():
    """Ring of 4, 1 byte/s links except node 2's 0.5 byte/s uplink, node 1 computes 3 s, the others
    1 s, messages of 2 bytes: node 2 sends 2 messages at 0.25 byte/s each (fair share) from t=1,
    done at 9; node 1's two leave at 3, at 0.5 byte/s each (its 1 byte/s uplink halved), done at 7;
    latency 0.5 s: the round ends at 9.5."""
    w = sp.csr_matrix(np.array([[0, 1, 0, 1], [1, 0, 1, 0], [0, 1, 0, 1], [1, 0, 1, 0]], float) / 3
                      + np.eye(4) / 3)
    lat = np.full((4, 4), 0.5)
    np.fill_diagonal(lat, 0)
    tm = RoundTimer(np.array([1.0, 3.0, 1.0, 1.0]), np.array([1.0, 1.0, 0.5, 1.0]), np.full(4, np.inf), lat)
    assert tm.round(np.ones(4), w, 2.0) == pytest.approx(9.5, rel=1e-12)
    assert tm.round(np.ones(4), w, 2.0) == pytest.approx(9.5, rel=1e-12)
    assert tm.seconds == pytest.approx(19.0)
    np.testing.assert_allclose(tm.busy, [2, 6, 2, 2])
    np.testing.assert_allclose(tm.idle, [17, 13, 17, 17])


RUN = ["method=dpsgd", "model=mlp", "data=mnist", "clients=8", "topology=ring", "rounds=4", "eval_every=2",
       "data.global_test_size=100", "data.local_test_size=10", "progress=false"]


def test_a_dpsgd_run_takes_r_times_c_plus_k_m_over_b(data_root, tmp_path):
    """D-PSGD (K = 1 local step a round) on a ring (k = 2), every node 0.05 s a step, 10 Mbit/s
    uplinks, 1 ms latency: a round is 0.05 + 2 M / 1.25e6 + 0.001 s, M the MLP's float32 bytes
    (784*64 + 64 + 64*10 + 10 = 50,890 parameters x 4 bytes); the metrics at rounds 2 and 4 are 2
    and 4 rounds of it; learning is what the untimed run learns."""
    timed = vecgossip.run(overrides=[*RUN, "clock.enabled=true", "clock.compute.seconds=0.05",
                                     "clock.links.uplink=10", "clock.links.latency=0.001", f"data_root={data_root}"],
                          run_dir=tmp_path / "timed")
    plain = vecgossip.run(overrides=[*RUN, f"data_root={data_root}"], run_dir=tmp_path / "plain")
    m = 50_890 * 4
    per_round = 0.05 + 2 * m / (10e6 / 8) + 0.001
    df = timed.metrics
    assert list(df["round"]) == [0, 2, 4]
    np.testing.assert_allclose(df["seconds"], [0, 2 * per_round, 4 * per_round], rtol=1e-9)
    np.testing.assert_allclose(df["idle_seconds_mean"], [0, 2 * (per_round - 0.05), 4 * (per_round - 0.05)],
                               rtol=1e-9)
    for col in ("acc_mean", "xbar_acc", "consensus_distance", "bytes_cumulative"):
        assert list(df[col]) == list(plain.metrics[col]), col
    nodes = pd.read_csv(tmp_path / "timed" / "clock_nodes.csv")      # per node: 2 messages a round of M bytes
    assert nodes.node.tolist() == list(range(8)) and (nodes.bytes_sent == 4 * 2 * m).all()
    assert (nodes.uplink_mbps == 10).all() and (nodes.step_seconds == 0.05).all()
    np.testing.assert_allclose(nodes.busy_seconds, 4 * 0.05, rtol=1e-12)
    np.testing.assert_allclose(nodes.idle_seconds, 4 * (per_round - 0.05), rtol=1e-9)
    assert not (tmp_path / "plain" / "clock_nodes.csv").exists()
    clock = timed.summary["clock"]
    assert clock["virtual_seconds"] == pytest.approx(4 * per_round, rel=1e-9)
    assert clock["busy_mean"] == pytest.approx(4 * 0.05)
    assert plain.summary["clock"] is None
    subprocess.run([sys.executable, "-m", "vecgossip.report", str(tmp_path), "--out", str(tmp_path / "report")],
                   cwd=REPO, check=True, capture_output=True, timeout=300)
    rows = pd.read_csv(tmp_path / "report" / "rounds.csv").set_index("run_dir")
    assert rows.loc["timed", "virtual_seconds"] == pytest.approx(4 * per_round, rel=1e-9)
    assert np.isnan(rows.loc["plain", "virtual_seconds"])
    assert (tmp_path / "report" / "dfl_time.png").stat().st_size > 10_000
    times = pd.read_csv(tmp_path / "report" / "dfl_time.csv")          # the tick report's time columns
    assert times.method.tolist() == ["dpsgd / ring"] and times.virtual_seconds.iloc[0] == pytest.approx(
        4 * per_round, rel=1e-9)
    assert {"seconds_to_50", "seconds_to_70", "seconds_to_90"} <= set(times.columns)
    assert "s to 50%" in (tmp_path / "report" / "dfl_time.md").read_text()


def test_epidemic_learning_is_timed_on_the_matrices_it_mixes(data_root):
    """EL-Local on the complete overlay sends to s = 2 random peers a round (its own W, not the
    complete graph's 7 links a node): the clock times 8 x 2 messages a round, each one model
    (the bytes EL reports over its messages), and with unlimited downlinks a round is
    c K + s M / B + latency (K = 5 local steps of 20 ms, 10 Mbit/s uplinks, 2 ms)."""
    from conftest import run_of
    from vecgossip.composition.rounds import build_engine
    cfg = vecgossip.compose(overrides=[
        "method=el_local", "algorithm.s=2", "model=mlp", "data=mnist", "clients=8", "rounds=3", "eval_every=3",
        "local_steps=5", "local_epochs=null", "data.global_test_size=100", "data.local_test_size=10",
        "clock.enabled=true", "clock.compute.seconds=0.02", "clock.links.uplink=10", "clock.links.downlink=1000000",
        "clock.links.latency=0.002", f"data_root={data_root}"])
    engine = build_engine(run_of(cfg))
    timed, original = [], engine.timer.phase
    engine.timer.phase = lambda steps, s, r, size: timed.append((s.size, set(size))) or original(steps, s, r, size)
    engine.run(progress=False)
    m = 50_890 * 4
    assert timed == [(16, {m})] * 3
    per_round = 5 * 0.02 + 2 * m / (10e6 / 8) + 0.002
    assert engine.timer.seconds == pytest.approx(3 * per_round, rel=1e-9)


@pytest.mark.parametrize("args, match", [
    (["clock.compute.seconds=-1"], "clock.compute.seconds"),
    (["clock.enabled=true", "clock.compute.model=gamma"], "clock.compute.model"),
    (["clock.compute.model=lognormal"], "clock.compute.model has no effect without clock.enabled=true"),
    (["clock.enabled=true", "clock.policy=lifo"], "clock.policy"),
    (["clock.enabled=true", "clock.compute.model=trace"], "clock.compute.trace"),
    (["clock.enabled=true", "clock.compute.model=trace", "clock.compute.trace=/nonexistent.pkl"],
     "no such trace file"),
    (["clock.enabled=true", "clock.links.uplink=[{nodes:3,mbps:60}]"], "bandwidth groups hold 3 nodes"),
    (["clock.enabled=true", "clock.links.uplink=[{nodes:8,mbps:[13,10]}]"], "lo <= hi"),
    (["clock.enabled=true", "method=fedavg", "clock.barrier=node"], "a round through a server has one barrier"),
    (["clock.enabled=true", "clock.links.server=10"], "clock.links.server. has no effect with method=dpsgd"),
    (["clock.enabled=true", "method=fedavg", "clock.links.latency=/nonexistent.csv"],
     "give clock.links.server_latency"),
    (["clock.enabled=true", "faults.drop=0.1"], "lost messages are not timed so far"),
    (["clock.enabled=true", "clock.resolution=0.5"], "clock.resolution=0.5 has no effect on the round engine"),
    (["clock.enabled=true", "clock.resolution=0"], "clock.resolution"),
])
def test_bad_clock_options_are_one_line(args, match):
    overrides = [*RUN, *args]
    with pytest.raises((ConfigError, ValueError), match=match) as err:
        validate(make(overrides), overrides)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("args, match", [
    (["method=vc", "clock.resolution=2", "clock.compute.seconds=1"],
     "clock.resolution=2.0 is longer than the fastest node's step"),
    (["method=tl"], "has a peer rule"),
    (["method=robust_gossip"], "method=robust_gossip calls ctx.gather"),
    (["method=fedavg_tick", "topology=star"], "relays through a server node"),
    (["method=divshare", "clock.enabled=false"], "method=divshare runs in virtual seconds: it needs clock.enabled=true"),
    (["method=divshare", "algorithm.peers=8"], "algorithm.peers=8 is more than the other nodes"),
    (["method=divshare", "algorithm.fragments=0"], "fragments must be an integer in"),
    (["method=swift", "clock.enabled=false"], "method=swift runs in virtual seconds: it needs clock.enabled=true"),
    (["method=gossip_timers", "clock.enabled=false"], "method=gossip_timers runs in virtual seconds"),
])
def test_bad_tick_clock_options_are_one_line(args, match):
    degree = [] if "topology=star" in args else ["degree=2"]
    overrides = ["model=mlp", "data=mnist", "nodes=8", *degree, "max_ticks=20", "clock.enabled=true", *args]
    with pytest.raises((ConfigError, ValueError), match=match) as err:
        validate(make(overrides), overrides)
    assert "\n" not in str(err.value)


def test_divshare_groups_as_typed_on_the_command_line():
    """DivShare's setting as the docs type it: 53 + 7 nodes, the 7 drawn in [10, 13] Mbit/s."""
    from vecgossip.engines.clock.config import timer
    overrides = [*RUN, "clients=60", "clock.enabled=true", "clock.links.uplink=[{nodes:53,mbps:60},{nodes:7,mbps:[10,13]}]"]
    clock = validate(make(overrides), overrides).first.cfg.clock
    mbps = timer(clock, 60, 64, 0).uplink * 8 / 1e6
    assert (mbps == 60).sum() == 53 and ((mbps >= 10) & (mbps <= 13)).sum() == 7


def test_the_compute_model_does_not_move_the_links():
    """Speeds and bandwidths come from separate streams: comparing compute models keeps each
    node's links (a straggler draw would otherwise reshuffle which nodes have the slow links)."""
    from vecgossip.engines.clock.config import ClockConfig, timer
    groups = [{"nodes": 53, "mbps": 60.0}, {"nodes": 7, "mbps": (10.0, 13.0)}]
    a = timer(ClockConfig(enabled=True, links={"uplink": groups}), 60, 64, 3)
    b = timer(ClockConfig(enabled=True, links={"uplink": groups}, compute={"model": "stragglers"}), 60, 64, 3)
    assert (a.uplink == b.uplink).all() and (a.step_seconds != b.step_seconds).sum() == 6


def test_an_untimed_baseline_of_a_sweep_takes_clock_options():
    overrides = [*RUN, "clock.enabled=false", "clock.compute.model=lognormal"]
    assert not validate(make(overrides), overrides).first.cfg.clock.enabled


def test_an_untimed_tick_method_refuses_the_clock_in_one_line(data_root):
    """Through the CLI: exit 2, one line, no traceback (a robust merge gathers every message at once)."""
    res = subprocess.run([sys.executable, "-m", "vecgossip", "method=robust_gossip", "clock.enabled=true",
                          f"data_root={data_root}"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "calls ctx.gather" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


# -- churn ----------------------------------------------------------------------------------------
def test_churn_models_by_hand():
    """diurnal: node i online while (t / day + phase_i) mod 1 < availability, so for exactly that
    share of a day; bernoulli: one draw per node and slot (the same t in a slot, another slot
    another draw), about the availability; sessions: the stationary share online; trace: the
    FedScale intervals, repeating every finish_time; next_online: when an offline node returns."""
    from vecgossip.engines.clock.churn import Churn, ChurnConfig
    d = Churn(ChurnConfig(model="diurnal", availability=0.25, day=100.0), 40, 0, 7)
    grid = np.arange(0, 100, 0.5)
    share = np.mean([d.online(t) for t in grid], axis=0)
    np.testing.assert_allclose(share, 0.25, atol=0.01)
    back = d.next_online(10.0)
    assert not (d.online(back - 1e-6) & ~d.online(10.0)).any() and (d.online(back + 1e-6) & ~d.online(10.0)).any()
    want = min(10.0 + (np.mod(-(0.1 + d.phase[j]), 1.0)) * 100 for j in np.flatnonzero(~d.online(10.0)))
    assert back == pytest.approx(want)

    b = Churn(ChurnConfig(model="bernoulli", availability=0.7, period=10.0), 1000, 0, 7)
    assert (b.online(3.0) == b.online(9.9)).all() and (b.online(3.0) != b.online(10.0)).any()
    assert abs(b.online(3.0).mean() - 0.7) < 0.05

    s = Churn(ChurnConfig(model="sessions", online_seconds=30.0, offline_seconds=10.0), 400, 0, 7)
    assert abs(np.mean([s.online(t).mean() for t in range(0, 2000, 50)]) - 0.75) < 0.03
    again = Churn(ChurnConfig(model="sessions", online_seconds=30.0, offline_seconds=10.0), 400, 0, 7)
    assert (again.online(1234.5) == s.online(1234.5)).all()          # stateless in t: resume-safe

    entry = {"active": [10.0, 50.0], "inactive": [20.0, 60.0], "finish_time": 100.0}
    tr = Churn(ChurnConfig(model="trace", trace="x"), 3, 0, 7, behaviour={0: entry})
    assert [bool(tr.online(t)[0]) for t in (5, 15, 25, 55, 115, 165)] == [False, True, False, True, True, False]
    assert tr.next_online(25.0) == 50.0 and tr.next_online(65.0) == 110.0


def test_an_offline_client_neither_trains_nor_sends(data_root, tmp_path):
    """A behaviour trace in which client 0 is never online (its one session is empty) and the
    others always are: client 0 keeps its initial model and no other client hears from it; the
    metrics count 7 of 8 clients online every round."""
    import pickle
    from conftest import run_of
    from vecgossip.composition.rounds import build_engine
    always = {"active": [0.0], "inactive": [1e9], "finish_time": 1e9}
    path = tmp_path / "behaviour.pkl"
    path.write_bytes(pickle.dumps({0: {"active": [], "inactive": [], "finish_time": 1e9},
                                   **{i: always for i in range(1, 200)}}))
    cfg = vecgossip.compose(overrides=[*RUN, "clock.enabled=true", "clock.churn.model=trace",
                                       f"clock.churn.trace={path}", "clock.links.uplink=10", f"data_root={data_root}"])
    engine = build_engine(run_of(cfg))
    engine.timer.churn.set_clients([{"active": [], "inactive": [], "finish_time": 1e9}, *[always] * 7])   # node 0 empty
    start = engine.state.theta.clone()
    hist = engine.run(progress=False)
    assert torch.equal(engine.state.theta[0], start[0])
    assert not torch.equal(engine.state.theta[1], start[1])
    rows = [r for r in hist.rows if r["round"] > 0]
    assert rows and all(r["clients_online"] == 7 for r in rows)
