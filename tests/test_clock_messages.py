"""Messages are the unit of time (issue 55): the clock times exactly the messages an algorithm
sends, each of its own size; a user's own algorithms (tests/plugins/timed_algorithms.py, outside
the package, public interface only) run in seconds. Every expected time below is computed by hand
from the setting: K = 1 local step of c = 0.05 s, uplinks B = 10 Mbit/s (downlinks the uplinks'
unless said), latency 1 ms, M = the MLP's float32 bytes (50,890 parameters x 4)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import vecgossip
from conftest import kill_at_first_checkpoint
from test_config import REPO
from vecgossip.core.errors import ConfigError

PLUGINS = Path(__file__).parent / "plugins"
M = 50_890 * 4
B = 10e6 / 8
C, LAT = 0.05, 0.001
BASE = ["model=mlp", "data=mnist", "topology=ring", "rounds=2", "eval_every=1", "local_steps=1", "local_epochs=null",
        "data.global_test_size=100", "data.local_test_size=10", "progress=false", "clock.enabled=true",
        f"clock.compute.seconds={C}", "clock.links.uplink=10", f"clock.links.latency={LAT}"]


@pytest.fixture(autouse=True)
def plugins_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGINS))


def timed(tmp_path, data_root, name, *extra, clients=4):
    res = vecgossip.run(overrides=[*BASE, f"clients={clients}", *extra, f"data_root={data_root}"],
                        run_dir=tmp_path / name)
    return res, pd.read_csv(tmp_path / name / "clock_nodes.csv")


def test_a_read_only_neighbourhood_call_adds_no_message(tmp_path, data_root):
    """Client 0 alone sends, to its two ring neighbours (it read the round's neighbourhoods and
    message count first): its uplink carries two models, each receiver's downlink one, so a round
    is c + 2 M / B + latency; only client 0 sent bytes (2 M a round). Timing every topology link
    because the algorithm read them (the old inference) makes a round c + 2 x (M / 2) ... with 8
    messages of the mean size: a different number."""
    res, nodes = timed(tmp_path, data_root, "leader", "method=dpsgd", "algorithm._target_=timed_algorithms.LeaderBroadcast")
    per_round = C + 2 * M / B + LAT
    np.testing.assert_allclose(res.metrics["seconds"], [0, per_round, 2 * per_round], rtol=1e-12)
    np.testing.assert_allclose(nodes.bytes_sent, [2 * 2 * M, 0, 0, 0], rtol=1e-12)


def test_the_slowest_sender_sets_a_barrier_round(tmp_path, data_root):
    """Clients 0-2 send 8-bit messages (M / 4), client 3 float32 models (M), each to its two ring
    neighbours; downlinks unlimited, so each uplink serves its own two messages: client 3 needs
    2 M / B, the others 2 (M / 4) / B, and the barrier round is c + 2 M / B + latency (the mean
    size, 7 M / 16, would make it 2 x 7 M / 16 / B: 44% of the slowest sender's time)."""
    res, nodes = timed(tmp_path, data_root, "sized", "method=dpsgd", "algorithm._target_=timed_algorithms.SizedGossip",
                       "+algorithm.quantized=3", "clock.links.downlink=1000000")
    per_round = C + 2 * M / B + LAT
    np.testing.assert_allclose(res.metrics["seconds"], [0, per_round, 2 * per_round], rtol=1e-12)
    np.testing.assert_allclose(nodes.bytes_sent, 2 * np.array([M / 2, M / 2, M / 2, 2 * M]), rtol=1e-12)


def test_a_round_with_no_sender_is_compute_only(tmp_path, data_root):
    res, nodes = timed(tmp_path, data_root, "quiet", "method=dpsgd", "algorithm._target_=timed_algorithms.SizedGossip",
                       "+algorithm.quiet=true")
    np.testing.assert_allclose(res.metrics["seconds"], [0, C, 2 * C], rtol=1e-12)      # no latency either
    assert (nodes.bytes_sent == 0).all()
    np.testing.assert_allclose(nodes.idle_seconds, 0.0, atol=1e-15)


def test_churn_counts_only_the_messages_delivered(tmp_path, data_root):
    """D-PSGD on a ring of 8 with client 0 never online (a behaviour trace): clients 1 and 7 send
    one model a round (to 2 and 6), 2-6 two, client 0 none. Every flow gets 5 Mbit/s (each uplink
    and downlink it crosses holds two flows, or one flow whose other end holds two), so a round is
    c + 2 M / B + latency, and the bytes are [0, M, 2M, 2M, 2M, 2M, 2M, M] a round. Folding the
    two unsent messages into the delivered ones (the old inference) made each 14/12 M long."""
    import pickle
    always = {"active": [0.0], "inactive": [1e9], "finish_time": 1e9}
    never = {"active": [], "inactive": [], "finish_time": 1e9}
    path = tmp_path / "behaviour.pkl"
    path.write_bytes(pickle.dumps({i: (never if i == 0 else always) for i in range(8)}))
    from vecgossip.composition.rounds import build_engine
    from conftest import run_of
    cfg = vecgossip.compose(overrides=[*BASE, "method=dpsgd", "clients=8", "clock.churn.model=trace",
                                       f"clock.churn.trace={path}", f"data_root={data_root}"])
    engine = build_engine(run_of(cfg))
    engine.timer.churn.set_clients([never, *[always] * 7])          # the draw of clients from the trace: fixed
    engine.run(progress=False)
    per_round = C + 2 * M / B + LAT
    assert engine.timer.seconds == pytest.approx(2 * per_round, rel=1e-12)
    np.testing.assert_allclose(engine.timer.bytes_sent, 2 * M * np.array([0, 1, 2, 2, 2, 2, 2, 1]), rtol=1e-12)


def test_a_users_tick_algorithm_runs_in_seconds_as_the_built_in_it_equals(tmp_path, data_root):
    """EagerGossip (a user's TickAlgorithm: send on every link, merge by Eq. 1 with beta 0.25)
    runs in virtual seconds on slow links and gives the built-in gossip's run with beta 0.25 bit
    for bit: the same services, the same messages, the same times."""
    tick = ["model=mlp", "data=mnist", "nodes=6", "degree=2", "max_ticks=30", "eval_every=10", "t_acq=1",
            "data.local_eval_size=100", "progress=false", "clock.enabled=true",
            "clock.compute.model=lognormal", "clock.compute.seconds=1", "clock.resolution=0.25",
            "clock.links.uplink=2", f"data_root={data_root}"]
    mine = vecgossip.run(overrides=["method=gossip", "algorithm._target_=timed_algorithms.EagerGossip", "~algorithm.R",
                                    "~algorithm.correction", "~algorithm.compression", "~algorithm.tl", "algorithm.beta=0.25", *tick],
                         run_dir=tmp_path / "mine")
    built = vecgossip.run(overrides=["method=gossip", "algorithm.beta=0.25", *tick], run_dir=tmp_path / "built")
    cols = [c for c in built.metrics.columns if c not in ("wall_seconds",)]
    pd.testing.assert_frame_equal(mine.metrics[cols], built.metrics[cols])
    assert (tmp_path / "mine" / "clock_nodes.csv").read_bytes() == (tmp_path / "built" / "clock_nodes.csv").read_bytes()
    assert mine.summary["clock"]["virtual_seconds"] == 7.5 and mine.summary["method_params"] == {"beta": 0.25}


def test_an_instant_mix_on_the_tick_clock_is_refused_in_one_line(tmp_path, data_root):
    with pytest.raises(ConfigError, match="ctx.mix delivers every message at once") as err:
        vecgossip.run(overrides=["method=gossip", "algorithm._target_=timed_algorithms.MixingTick", "~algorithm.R",
                                 "~algorithm.correction", "~algorithm.compression", "~algorithm.tl", "~algorithm.beta",
                                 "model=mlp",
                                 "data=mnist", "nodes=4", "degree=2", "max_ticks=4", "progress=false",
                                 "clock.enabled=true", "clock.compute.seconds=1", f"data_root={data_root}"],
                      run_dir=tmp_path / "mixing")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("size, match", [([1.0, 2.0], r"one per client \(4,\)"), (-1.0, "finite and >= 0")])
def test_a_bad_payload_size_is_one_line(size, match):
    from vecgossip.engines.rounds.outbox import payload_bytes
    with pytest.raises(ValueError, match=match):
        payload_bytes(size, 4)


def test_a_device_traces_communication_sets_the_links(tmp_path, data_root):
    """FedScale's device trace, one device of 50 ms a sample and 800 kbps: a step of batch 16 is
    3 x 16 x 50 / 1000 = 2.4 s and every link 800 kbit/s = 100,000 bytes/s both ways (FedScale's
    one rate); D-PSGD on a ring of 4 sends two models a node, each flow at half a link: a round is
    2.4 + 2 M / 1e5 + latency. With clock.links.uplink=10 the typed links win."""
    import pickle
    path = tmp_path / "devices.pkl"
    path.write_bytes(pickle.dumps({0: {"computation": 50.0, "communication": 800.0}}))
    trace = ["method=dpsgd", "data.batch_size=16", "clock.compute.model=trace", f"clock.compute.trace={path}"]
    res = vecgossip.run(overrides=[*[o for o in BASE if not o.startswith("clock.links.uplink")], "clients=4", *trace,
                                   f"data_root={data_root}"], run_dir=tmp_path / "trace")
    per_round = 2.4 + 2 * M / 1e5 + LAT
    np.testing.assert_allclose(res.metrics["seconds"], [0, per_round, 2 * per_round], rtol=1e-12)
    nodes = pd.read_csv(tmp_path / "trace" / "clock_nodes.csv")
    np.testing.assert_allclose(nodes.uplink_mbps, 0.8, rtol=1e-12)
    typed = vecgossip.run(overrides=[*BASE, "clients=4", *trace, f"data_root={data_root}"], run_dir=tmp_path / "typed")
    np.testing.assert_allclose(typed.metrics["seconds"].iloc[1], 2.4 + 2 * M / B + LAT, rtol=1e-12)


# -- the user's algorithms in seconds: replicas, torchrun shards, kill -9 resume (the CLI, as a user) --
USER_ROUNDS = ["method=dpsgd", "algorithm._target_=timed_algorithms.SizedGossip", "+algorithm.quantized=3",
               "model=mlp", "data=mnist", "topology=ring", "clients=6", "rounds=6", "eval_every=2", "local_steps=1",
               "local_epochs=null", "data.global_test_size=100", "data.local_test_size=10", "progress=false",
               "clock.enabled=true", "clock.compute.model=stragglers", "clock.compute.fraction=0.34",
               "clock.links.uplink=10", "clock.links.latency=0.001"]
USER_TICK = ["method=gossip", "algorithm._target_=timed_algorithms.EagerGossip", "~algorithm.R", "~algorithm.correction",
             "~algorithm.compression", "~algorithm.tl", "algorithm.beta=0.25", "model=mlp", "data=mnist", "nodes=6",
             "degree=2", "max_ticks=40", "eval_every=10", "data.local_eval_size=100", "progress=false",
             "clock.enabled=true", "clock.compute.model=lognormal", "clock.compute.seconds=1", "clock.resolution=0.25",
             "clock.links.uplink=2", "clock.links.latency=0.05"]


def user_cli(out, args, data_root, ranks=1, wait=True):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                            "MASTER_PORT")}
    env.update(PYTHONPATH=os.pathsep.join([str(PLUGINS), env.get("PYTHONPATH", "")]), OMP_NUM_THREADS="1",
               MPLBACKEND="Agg")
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
                if ranks > 1 else [sys.executable])
    cmd = [*launcher, "-m", "vecgossip", *args, f"data_root={data_root}", f"hydra.run.dir={out}"]
    if not wait:
        return subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def same_files(a, b, names=("metrics.csv", "accuracy.npy", "clock_nodes.csv")):
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.mark.parametrize("engine", ["rounds", pytest.param("tick", marks=pytest.mark.slow)])   # tick: -m slow
def test_a_users_timed_algorithm_as_replicas_equals_separate_runs(tmp_path, data_root, engine):
    args = USER_ROUNDS if engine == "rounds" else USER_TICK
    both = user_cli(tmp_path / "both", [*args, "replicas=2"], data_root)
    assert " wall=" in both.stdout                                    # the one-line summary's wall time
    for s in (0, 1):
        user_cli(tmp_path / f"seed{s}", [*args, f"seed={s}"], data_root)
        same_files(tmp_path / "both" / f"replica{s}", tmp_path / f"seed{s}")


@pytest.mark.slow   # torchrun: a user's algorithm in seconds sharded over 2 gloo ranks (python -m pytest -m slow)
@pytest.mark.parametrize("engine", ["rounds", "tick"])
def test_a_users_timed_algorithm_on_two_ranks_equals_one_process(tmp_path, data_root, engine):
    args = USER_ROUNDS if engine == "rounds" else USER_TICK
    user_cli(tmp_path / "one", args, data_root)
    user_cli(tmp_path / "two", args, data_root, ranks=2)
    same_files(tmp_path / "one", tmp_path / "two")
    assert json.loads((tmp_path / "two" / "summary.json").read_text())["shards"]["processes"] == 2


@pytest.mark.parametrize("engine", [pytest.param("rounds", marks=pytest.mark.slow), "tick"])   # rounds: -m slow
def test_a_users_timed_algorithm_killed_and_resumed_equals_an_uninterrupted_run(tmp_path, data_root, engine):
    """kill -9 after a checkpoint (messages in flight on the tick engine), the same command again:
    the uninterrupted run's bits."""
    args = ([*USER_ROUNDS, "rounds=60", "checkpoint_every=1"] if engine == "rounds"
            else [*USER_TICK, "max_ticks=400", "checkpoint_every=10"])
    user_cli(tmp_path / "ref", args, data_root)
    run = tmp_path / "run"
    proc = user_cli(run, args, data_root, wait=False)
    kill_at_first_checkpoint(proc, run)
    again = user_cli(run, args, data_root)
    same_files(tmp_path / "ref", run)
    unit = "round" if engine == "rounds" else "tick"                # issue 58 item 6: it says where it goes on
    assert f"continuing from {unit} " in again.stderr and f"(the checkpoint in {run})" in again.stderr
    import re                                                         # and its one-line summary has the wall time
    assert re.search(rf"{unit}s=\d+ wall=\d+\.\ds -> {re.escape(str(run))}", again.stdout), again.stdout[-500:]


def test_a_node_leaving_mid_round_is_cut_off_and_the_others_speed_up(tmp_path, data_root):
    """D-PSGD on a ring of 3 (every node sends to both others, W = 1/3 everywhere): node 2 goes
    offline 0.2 s into round 1 (diurnal churn, its phase set), while the six transfers run at
    B / 2 each. Its four transfers are aborted there; 0 -> 1 and 1 -> 0 then run at B, so their
    last bytes leave at 0.2 + (M - 0.15 B / 2) / B and the round ends a latency later. Node 2
    keeps its trained model; nodes 0 and 1 average each other's (the lost third stays home:
    2/3 own + 1/3 other). Round 2 starts with node 2 offline: c + M / B + latency. Bytes are those
    of the messages that arrived."""
    from conftest import run_of
    from vecgossip.composition.rounds import build_engine
    cfg = vecgossip.compose(overrides=[*BASE, "method=dpsgd", "clients=3", "clock.churn.model=diurnal",
                                       "clock.churn.day=1000", "clock.churn.availability=0.5", f"data_root={data_root}"])
    engine = build_engine(run_of(cfg))
    phase = engine.timer.churn.phase
    phase[:] = 0.0
    phase[2] = 0.5 - 0.2 / 1000                                # node 2 leaves at 0.2 s
    trained, mixed = [], []
    communicate = engine.algorithm.communicate

    def spy(ctx, t, clients):
        trained.append(ctx.state.theta.clone())
        sent = communicate(ctx, t, clients)
        mixed.append(ctx.state.theta.clone())
        return sent
    engine.algorithm.communicate = spy
    hist = engine.run(progress=False)
    first = 0.2 + (M - (0.2 - C) * B / 2) / B + LAT
    second = C + M / B + LAT
    np.testing.assert_allclose([r["seconds"] for r in hist.rows], [0, first, first + second], rtol=1e-12)
    y, after = trained[0], mixed[0]                            # round 1's models before and after gossip
    np.testing.assert_allclose(after[0].numpy(), (2 * y[0] + y[1]).numpy() / 3, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(after[1].numpy(), (2 * y[1] + y[0]).numpy() / 3, rtol=1e-6, atol=1e-7)
    assert np.array_equal(after[2].numpy(), y[2].numpy())     # cut off: it kept its own
    np.testing.assert_allclose(engine.timer.bytes_sent, [2 * M, 2 * M, 0], rtol=1e-12)


def test_a_second_tensor_that_changes_who_arrives_stops_the_run():
    """StepTimer: two nodes exchange a message at one step; node 1 leaves at 1.5 s. The first
    tensor (1 B each way at 1 B/s) arrives by 1 s; a second one of 1 B more makes each message
    2 B, arriving at 2 s, after node 1 left: the fates already mixed would change, so the run
    stops in one line."""
    from vecgossip.engines.clock.rounds import RoundTimer
    from vecgossip.engines.rounds.timing import StepTimer

    class Leaving:
        def next_offline(self, t):
            return np.array([np.inf, 1.5])

    timer = RoundTimer(np.zeros(2), np.ones(2), np.ones(2), np.zeros((2, 2)), "fair", Leaving())
    st = StepTimer(timer, 2)
    s, r = np.array([0, 1]), np.array([1, 0])
    assert st.lost(0, s, r, np.ones(2), "m").size == 0
    with pytest.raises(ConfigError, match="a second tensor at gossip step 0 changes which messages arrive"):
        st.lost(0, s, r, 2 * np.ones(2), "m")
    st = StepTimer(timer, 2)
    np.testing.assert_array_equal(st.lost(0, s, r, 2 * np.ones(2), "m"), [1 * 2 + 0, 0 * 2 + 1])   # both cut
    st.finish()
    assert timer.seconds == 1.5 and timer.bytes_sent.sum() == 0
