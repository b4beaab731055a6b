"""The tick engine in virtual seconds (engines/tick/timed/, issue 48) against its twins:

- the per-event twin (tests/reference/gossip_seconds.py: nn.Modules, Python-list buffers, the
  transfers' loop twin tests/reference/clock.py) on small random cases with stragglers, slow
  uplinks, latency and both sharing policies: the same models (float64, 1e-10), steps and
  staleness;
- zero latency, unlimited bandwidth and c = T_acq x resolution: the tick engine's recording, bit
  for bit (metrics rows and models), with and without variance correction and compression;
- a latency shorter than one window: still the tick engine's run (the delayed path's receive sums
  the same models in another order: 1e-12);
- resume from a checkpoint taken with messages in flight: the uninterrupted run, bit for bit;
- AD-PSGD, DivShare, SWIFT and gossip learning with timers in seconds against their per-message
  twins (tests/reference/*_seconds.py), by hand, and on resume.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import reference.gossip_seconds
from settings import TickSetting
from test_engine import N, mlp_engine, mlp_setting
from vecgossip.engines.tick.timed.windows import Seconds

WINDOWS = 24


def seconds_of(step, up=np.inf, down=None, latency=0.0, policy="fair", resolution=1.0) -> Seconds:
    step = np.broadcast_to(np.asarray(step, float), (N,)).copy()
    up = np.broadcast_to(np.asarray(up, float), (N,)).copy()
    down = up if down is None else np.broadcast_to(np.asarray(down, float), (N,)).copy()
    lat = np.broadcast_to(np.asarray(latency, float), (N, N)).copy()
    np.fill_diagonal(lat, 0.0)
    return Seconds(step, up, down, lat, policy, resolution)


def model_bytes(layout) -> float:
    return float(layout.size * 8)          # float64 models in these tests


CASES = [   # (seed, policy, resolution, beta, correction, R)
    (0, "fair", 1.0, 0.5, False, 1),
    (1, "fifo", 0.5, 0.0, True, 1),
    (2, "fair", 0.25, 0.5, True, 2),
    pytest.param((3, "fifo", 1.0, 0.5, False, 1), marks=pytest.mark.slow),   # FIFO again: seed 1 has it; -m slow
]


@pytest.mark.parametrize("case", CASES)
def test_seconds_engine_matches_per_event_twin(case):
    seed, policy, res, beta, correction, R = case
    graph, data, layout, init = mlp_setting(seed)
    rng = np.random.default_rng(100 + seed)
    step = rng.integers(2, 6, N) * 0.5 * np.where(rng.random(N) < 0.3, 2.5, 1.0)     # stragglers; >= res
    size = model_bytes(layout)
    up = size / rng.uniform(0.05, 0.6, N)             # a model takes 0.05-0.6 s on an idle uplink
    lat = rng.uniform(0, 0.4, (N, N))
    clock = seconds_of(step, up, None, lat, policy, res)
    cfg = TickSetting(R=R, beta=beta, correction=correction, batch_size=16)
    engine = mlp_engine(cfg, graph, data, layout, init, seed, seconds=clock)
    assert engine.transport.message_bytes == size
    compacted, compact = [], engine.transport.compact
    engine.transport.compact = lambda w: compacted.append(w) or compact(w)
    windows = int(WINDOWS / res)                      # 24 virtual seconds
    for t in range(windows):
        engine.tick(t)
    want, iters, stale = reference.gossip_seconds.run(init, graph, data, None, cfg, R, seed, windows, list(step),
                                                      list(up), list(up), lat.tolist(), size, policy, res)
    assert engine.state.iters.tolist() == iters
    assert engine.transport.received.sum() > 0 and engine.t_first_average is not None
    np.testing.assert_allclose(engine.transport.staleness, stale, rtol=1e-9, atol=1e-9)
    rel = (engine.state.theta - want).norm(dim=1) / want.norm(dim=1)
    assert rel.max() <= 1e-10, rel
    assert compacted, "no send wave's snapshot was compacted: the slow-link path was not exercised"
    # the sends it made: one message per link per step, each of the model's bytes
    degree = np.asarray(graph.to_networkx().degree())[:, 1]
    assert np.array_equal(engine.transport.bytes_sent, size * degree * np.asarray(iters))


def run_both(cfg: TickSetting, clock: Seconds, seed: int = 5, dtype=torch.float32):
    graph, data, layout, init = mlp_setting(seed, dtype)
    plain = mlp_engine(cfg, graph, data, layout, init, seed)
    timed = mlp_engine(cfg, graph, data, layout, init, seed, seconds=clock)
    return plain, plain.run(progress=False), timed, timed.run(progress=False)


@pytest.mark.parametrize("correction,compression", [(False, 1.0), (True, 1.0), (False, 0.3)])
def test_instant_links_and_compute_t_acq_reproduce_the_tick_engine_bit_for_bit(correction, compression):
    res = 0.5
    cfg = TickSetting(t_acq=(3, 3), beta=0.0 if correction else 0.5, correction=correction,
                      compression=compression, batch_size=16, max_ticks=40, eval_every=10)
    plain, h1, timed, h2 = run_both(cfg, seconds_of(3 * res, resolution=res))
    assert torch.equal(plain.state.theta, timed.state.theta)
    assert len(h1.rows) == len(h2.rows) == 5          # ticks 0, 10, 20, 30 and the end, 39
    for a, b in zip(h1.rows, h2.rows):
        assert b.pop("seconds") == a["tick"] * res
        assert a == b
    assert all(np.array_equal(x, y) for x, y in zip(h1.acc, h2.acc))


def test_latency_within_one_window_is_the_tick_engines_run():
    """Messages delayed 0.4 s with 1 s windows still arrive in the window they were sent in: the
    delayed path (snapshots, transfers, a receive per send wave) gives the tick engine's models."""
    cfg = TickSetting(t_acq=(2, 2), batch_size=16, max_ticks=30, eval_every=10)
    plain, h1, timed, h2 = run_both(cfg, seconds_of(2.0, latency=0.4), dtype=torch.float64)
    assert not timed.seconds.instant
    rel = (plain.state.theta - timed.state.theta).norm(dim=1) / plain.state.theta.norm(dim=1)
    assert rel.max() < 1e-12
    assert timed.transport.staleness.sum() == pytest.approx(0.4 * timed.transport.received.sum())


def test_slow_links_delay_the_first_merge_by_the_transfer_time():
    """By hand: a 3-regular 6-node graph, every step 10 s, every uplink and downlink carrying one
    model in 2 s: at 0 each node starts 3 messages, which share its uplink (and each downlink
    carries 3 messages) fairly at a third of the rate, so all arrive at 6 s. The first buffers
    are full at 6 s: the first merge is in window 6, not 0; every message is 6 s stale."""
    graph, data, layout, init = mlp_setting(9)
    size = model_bytes(layout)
    engine = mlp_engine(TickSetting(batch_size=16), graph, data, layout, init, 9,
                        seconds=seconds_of(10.0, up=size / 2.0))
    for t in range(7):
        engine.tick(t)
        if t < 6:
            assert engine.t_first_average is None
    assert engine.t_first_average == 6
    assert engine.transport.received.tolist() == [3.0] * N
    assert engine.transport.staleness.sum() == pytest.approx(6.0 * engine.transport.received.sum())


def test_resume_with_messages_in_flight_is_the_uninterrupted_run():
    graph, data, layout, init = mlp_setting(4)
    size = model_bytes(layout)
    clock = seconds_of(np.linspace(1.0, 2.5, N), up=size / 1.5, latency=0.3, resolution=0.5)
    cfg = TickSetting(batch_size=16)
    whole = mlp_engine(cfg, graph, data, layout, init, 4, seconds=clock)
    for t in range(30):
        whole.tick(t)
    first = mlp_engine(cfg, graph, data, layout, init, 4, seconds=clock)
    for t in range(13):
        first.tick(t)
    assert first.transport.flow.sender.size > 0          # messages in flight at the checkpoint
    from vecgossip.engines.tick.state import History
    saved = first.state_dict(13, History())
    second = mlp_engine(cfg, graph, data, layout, init, 99, seconds=clock)
    t0, _ = second.load_state_dict(saved)
    for t in range(t0, 30):
        second.tick(t)
    assert torch.equal(whole.state.theta, second.state.theta)
    assert np.array_equal(whole.transport.staleness, second.transport.staleness)


def test_a_timed_gossip_run_through_the_cli_by_hand(data_root, tmp_path):
    """python -m vecgossip on the tick engine in seconds, 8 nodes on a ring (degree 2), MNIST MLP
    (50,890 float32 parameters: 203,560 bytes a model), a step every 2 s, 10 Mbit/s links: each
    step's two messages share the uplink (and each downlink carries two), so both arrive after
    2 x 203,560 x 8 / 10^7 = 0.3257 s, long before the next step. 20 one-second ticks: steps at
    0, 2, ..., 18 s, 10 a node, 20 messages sent and received each; then the report's time table."""
    import json
    import subprocess
    import sys
    from test_config import REPO
    out = tmp_path / "run"
    res = subprocess.run([sys.executable, "-m", "vecgossip", "method=gossip", "model=mlp", "data=mnist", "nodes=8",
                          "topology=ring", "max_ticks=20", "eval_every=5", "clock.enabled=true",
                          "clock.compute.seconds=2", "clock.links.uplink=10", f"data_root={data_root}",
                          "progress=false", f"hydra.run.dir={out}"], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    c = json.loads((out / "summary.json").read_text())["clock"]
    m = 50_890 * 4
    assert c["bytes_sent_mean"] == 10 * 2 * m
    assert c["messages_received_mean"] == 20 and c["in_flight"] == 0
    assert c["staleness_mean"] == pytest.approx(2 * m * 8 / 1e7, rel=1e-9)
    assert c["virtual_seconds"] == 20.0 and c["busy_mean"] == 9 * 2.0
    import pandas as pd
    assert pd.read_csv(out / "metrics.csv").seconds.tolist() == [0.0, 5.0, 10.0, 15.0, 19.0]   # and the end
    nodes = pd.read_csv(out / "clock_nodes.csv")                 # the same per node: every node alike here
    assert len(nodes) == 8 and (nodes.bytes_sent == 10 * 2 * m).all() and (nodes.messages_received == 20).all()
    np.testing.assert_allclose(nodes.staleness_mean, 2 * m * 8 / 1e7, rtol=1e-9)
    assert (nodes.busy_seconds == 9 * 2.0).all() and (nodes.idle_seconds == 20 - 9 * 2.0).all()
    assert (nodes.uplink_mbps == 10).all() and (nodes.downlink_mbps == 10).all()
    rep = subprocess.run([sys.executable, "-m", "vecgossip.report", str(out)], cwd=REPO, capture_output=True,
                         text=True, timeout=300)
    assert rep.returncode == 0, rep.stderr[-2000:]
    assert (out / "time.png").exists() and "Time to accuracy" in (out / "time.md").read_text()


class Offline:
    """Churn by hand: ``node`` offline from ``start`` to ``stop`` seconds (the rest always online)."""

    def __init__(self, node: int, start: float, stop: float) -> None:
        self.node, self.start, self.stop = node, start, stop

    def online(self, t: float) -> np.ndarray:
        on = np.ones(N, dtype=bool)
        on[self.node] = not self.start <= t < self.stop
        return on

    def next_online(self, t: float) -> float:
        return t if self.online(t).any() else self.stop


def test_a_node_going_offline_aborts_its_transfers_by_hand():
    """6 nodes, 3-regular; every step 10 s; uplinks carry a model in 2 s, downlinks unlimited: at 0
    every node starts 3 messages sharing its uplink (each at a third: due at 6 s). Node 0 goes
    offline at 3 s: its 3 outgoing and 3 incoming transfers are lost; each neighbour of node 0 then
    has 2 messages, half sent, sharing its uplink: both arrive at 3 + 2 = 5 s; the other 2 nodes'
    messages at 6 s. At 10 s node 0's step slot passes (offline) and its neighbours' 3 messages to
    it never start. So by 12 s: 9 messages lost; node 0 received 0, its neighbours 2 each (not
    enough to merge: their buffers wait for 3), the other two 3 each (they merge in window 6);
    staleness 6 x 5 + 6 x 6 = 66 s; node 0 trained once, the others twice."""
    graph, data, layout, init = mlp_setting(9)
    size = model_bytes(layout)
    clock = seconds_of(10.0, up=size / 2.0, down=np.inf)
    clock.churn = Offline(0, 3.0, 100.0)
    engine = mlp_engine(TickSetting(batch_size=16), graph, data, layout, init, 9, seconds=clock)
    for t in range(12):
        engine.tick(t)
    nbrs = sorted(graph.to_networkx().neighbors(0))
    tr = engine.transport
    assert tr.aborted == 9
    want = np.array([0 if i == 0 else 2 if i in nbrs else 3 for i in range(N)], float)
    assert np.array_equal(tr.received, want)
    assert tr.staleness.sum() == pytest.approx(66.0, rel=1e-9)
    assert engine.state.iters.tolist() == [1] + [2] * (N - 1)
    assert engine.schedule.skipped.tolist() == [1] + [0] * (N - 1)
    assert engine.t_first_average == 6
    assert np.array_equal(engine.buffers.held, np.where(want == 2, 2.0, 0.0))   # the neighbours still wait


# -- AD-PSGD in seconds: an exchange is two messages; the average and the gradient wait for both ----

def random_timing(seed: int, stream: int, steps=(0.5, 2.0), latency: float = 0.5, policy: str = "fair"):
    """The MLP setting of ``seed`` with a random timing drawn from ``default_rng(stream + seed)``:
    seconds a step uniform in ``steps``, uplinks of 0.2-1.5 s a model (messages queue), latency
    uniform in [0, ``latency``), 0.5 s windows. Returns (graph, data, layout, init), the model's
    bytes, the steps, uplinks and latencies, and the clock."""
    graph, data, layout, init = mlp_setting(seed)
    rng = np.random.default_rng(stream + seed)
    size = model_bytes(layout)
    step = rng.uniform(*steps, N)
    up = size / rng.uniform(0.2, 1.5, N)
    lat = rng.uniform(0, latency, (N, N))
    return (graph, data, layout, init), size, step, up, lat, seconds_of(step, up, None, lat, policy, 0.5)

def algorithm_engine(algorithm, graph, data, layout, init, seed, cfg, **kw):
    """A tick engine running ``algorithm`` on the small MLP setting (10 evaluation images)."""
    from vecgossip.engines.tick.engine import TickData, TickEngine
    from vecgossip.engines.tick.measures import EvalSet
    from vecgossip.models import make_forward
    from vecgossip.core.optim import SGDConfig
    from vecgossip.core.state import new_state
    from vecgossip.network.peers import Links
    d = TickData(data, EvalSet(data.batch(torch.arange(10))[0], data.labels[:10], None, None), cfg.batch_size)
    return TickEngine(cfg.options(), algorithm, new_state(layout, init.clone()), Links(graph), make_forward("mlp"),
                      SGDConfig(), d, torch.Generator().manual_seed(seed), np.random.default_rng(seed), **kw)


def adpsgd_engine(graph, data, layout, init, seed, cfg, **kw):
    from vecgossip.algorithms.adpsgd import ADPSGD
    return algorithm_engine(ADPSGD(), graph, data, layout, init, seed, cfg, **kw)


@pytest.mark.parametrize("seed,policy,churn", [(0, "fair", False), (1, "fifo", False), (2, "fair", True)])
def test_adpsgd_in_seconds_matches_the_per_exchange_twin(seed, policy, churn):
    """Random speeds (1-3 s), uplinks of 0.1-1.2 s a model, random latency, 0.5 s windows, 30
    virtual seconds: exchanges overlap, queue and complete out of start order. With churn
    (Bernoulli, 3 s slots, 70% online): exchanges with an offline peer not started, exchanges in
    flight cut (the initiator's step alone, or lost with it offline), slots passed offline."""
    import reference.adpsgd_seconds
    from vecgossip.engines.clock.churn import Churn, ChurnConfig
    graph, data, layout, init = mlp_setting(seed)
    rng = np.random.default_rng(200 + seed)
    size = model_bytes(layout)
    step = rng.uniform(1.0, 3.0, N)
    up = size / rng.uniform(0.1, 1.2, N)
    lat = rng.uniform(0, 0.3, (N, N))
    clock = seconds_of(step, up, None, lat, policy, 0.5)
    if churn:
        clock.churn = Churn(ChurnConfig(model="bernoulli", availability=0.7, period=3.0), N, seed, 7)
    cfg = TickSetting(batch_size=16)
    engine = adpsgd_engine(graph, data, layout, init, seed, cfg, seconds=clock)
    ref = adpsgd_engine(graph, data, layout, init, seed, cfg)
    windows = 60
    for t in range(windows):
        engine.tick(t)
    want, iters = reference.adpsgd_seconds.run(engine_copy(graph, data, layout, init, seed, cfg), ref, list(step),
                                               list(up), list(up), lat.tolist(), size, 0.5, windows, policy,
                                               churn=clock.churn)
    assert engine.state.iters.tolist() == iters and min(iters) >= (3 if churn else 5)
    assert churn or engine.transport.pairs_in_flight        # some still in flight at the end
    sched = engine.schedule
    lost = sched.steps - sched.skipped - engine.state.iters.numpy() - np.bincount(
        engine.transport.pairs["i"], minlength=N)   # gradients lost with their offline initiator
    if churn:                                         # every churn path taken
        assert engine.transport.aborted > 0 and sched.skipped.sum() > 0 and lost.sum() > 0
    else:
        assert not lost.any()
    rel = (engine.state.theta - want).norm(dim=1) / want.norm(dim=1)
    assert rel.max() <= 1e-10, rel


def engine_copy(graph, data, layout, init, seed, cfg):
    return adpsgd_engine(graph, data, layout, init, seed, cfg)


def test_adpsgd_with_instant_links_is_the_tick_engines_adpsgd_bit_for_bit():
    graph, data, layout, init = mlp_setting(3)
    cfg = TickSetting(t_acq=(2, 2), batch_size=16)
    plain = adpsgd_engine(graph, data, layout, init, 3, cfg)
    timed = adpsgd_engine(graph, data, layout, init, 3, cfg, seconds=seconds_of(1.0, resolution=0.5))
    for t in range(20):
        plain.tick(t)
        timed.tick(t)
    assert torch.equal(plain.state.theta, timed.state.theta) and torch.equal(plain.state.iters, timed.state.iters)
    assert timed.transport.received.sum() == 2 * 10 * N       # every exchange: one message each way


def test_adpsgd_exchanges_wait_for_their_two_messages_by_hand():
    """Two nodes, one link, a step every 10 s, links carrying a model in 1 s. At 0 both start an
    exchange with the other: 4 messages, two on each uplink at half rate: all arrive at 2 s. So
    nothing changes in windows 0 and 1; in window 2 both averages and both gradients apply: the
    untimed AD-PSGD's state after tick 0, bit for bit."""
    from vecgossip.network.topology import random_regular
    graph = random_regular(2, 1, 0)
    _, data, layout, init6 = mlp_setting(5)
    init = init6[:2].clone()
    size = model_bytes(layout)
    cfg = TickSetting(t_acq=(10, 10), batch_size=16)
    plain = adpsgd_engine(graph, data, layout, init, 5, cfg)
    plain.tick(0)
    step = np.full(2, 10.0)
    clock = Seconds(step, np.full(2, size / 1.0), np.full(2, np.inf), np.zeros((2, 2)), "fair", 1.0)
    timed = adpsgd_engine(graph, data, layout, init, 5, cfg, seconds=clock)
    for t in range(2):
        timed.tick(t)
        assert torch.equal(timed.state.theta, init) and timed.state.iters.tolist() == [0, 0]
    timed.tick(2)
    assert torch.equal(timed.state.theta, plain.state.theta) and timed.state.iters.tolist() == [1, 1]
    assert not timed.transport.pairs_in_flight and not timed.transport.pair_grads
    assert timed.transport.staleness.tolist() == [4.0, 4.0]     # each node: two exchanges of 2 s


# -- DivShare in seconds: fragments to random peers through FIFO uplinks ------------------------
def divshare_engine(graph, data, layout, init, seed, cfg, fragments=3, peers=2, flush=True, **kw):
    from vecgossip.algorithms.divshare import DivShare, Params
    return algorithm_engine(DivShare(Params(fragments, peers, flush)), graph, data, layout, init, seed, cfg, **kw)


@pytest.mark.parametrize("seed,policy,fragments,peers,flush", [(0, "fifo", 3, 2, True),
                                                              pytest.param(1, "fair", 4, 3, True, marks=pytest.mark.slow),
                                                              (2, "fifo", 3, 2, False)])   # fair: -m slow
def test_divshare_in_seconds_matches_the_per_message_twin(seed, policy, fragments, peers, flush):
    """Random speeds (1-3 s), uplinks of 0.2-1.5 s a model (fragments queue behind each other),
    random latency, 0.5 s windows, 20 virtual seconds: the same models (float64, 1e-10), steps,
    bytes sent (each fragment's own size; flushed ones not), messages received and flushed."""
    import reference.divshare_seconds
    (graph, data, layout, init), size, step, up, lat, clock = random_timing(seed, 300, (1.0, 3.0), 0.3, policy)
    cfg = TickSetting(batch_size=16)
    engine = divshare_engine(graph, data, layout, init, seed, cfg, fragments, peers, flush, seconds=clock)
    ref = divshare_engine(graph, data, layout, init, seed, cfg, fragments, peers, flush)
    windows = 40
    for t in range(windows):
        engine.tick(t)
    want, iters, sent, got, flushed = reference.divshare_seconds.run(
        divshare_engine(graph, data, layout, init, seed, cfg, fragments, peers, flush), ref, list(step), list(up),
        list(up), lat.tolist(), 0.5, windows, policy, fragments, peers, flush)
    tr = engine.transport
    assert engine.state.iters.tolist() == iters and min(iters) >= 6
    np.testing.assert_allclose(tr.bytes_sent, sent, rtol=1e-12)
    assert np.array_equal(tr.received, got) and tr.dropped == flushed
    assert (flushed > 0) == (flush and policy == "fifo")    # the slow uplinks did have a backlog to drop
    assert tr.flow.sender.size > 0                    # fragments still queued or in flight at the end
    offered = size * peers * sum(iters)               # peers x one model a step, in fragments of ~P / F
    if not flushed:
        assert sum(sent) == pytest.approx(offered, rel=0.05)
    rel = (engine.state.theta - want).norm(dim=1) / want.norm(dim=1)
    assert rel.max() <= 1e-10, rel


def test_divshare_fragments_by_hand():
    """Three nodes, each step 10 s, instant links, one fragment of the whole model to both
    others (fragments=1, peers=2): at 0 every node trains once and sends its model to the two
    others; at 10 s each averages its model with the two it received, (x_i + x_j + x_k) / 3, the
    same average for all three, before its second step. Checked against the untimed models after
    one step, by hand."""
    from vecgossip.network.topology import random_regular
    graph = random_regular(3, 2, 0)
    _, data, layout, init6 = mlp_setting(5)
    init = init6[:3].clone()
    cfg = TickSetting(batch_size=16)
    clock = Seconds(np.full(3, 10.0), np.full(3, np.inf), np.full(3, np.inf), np.zeros((3, 3)), "fifo", 1.0)
    eng = divshare_engine(graph, data, layout, init, 5, cfg, fragments=1, peers=2, seconds=clock)
    eng.tick(0)
    after_one = eng.state.theta.clone()
    tr = eng.transport
    assert tr.received.tolist() == [2, 2, 2] and tr.bytes_sent.tolist() == [2 * model_bytes(layout)] * 3
    assert torch.equal(tr.part_count, torch.full_like(after_one, 2.0))
    moved = []
    eng.merge_parts(np.arange(3))                 # what the second step does first
    for i in range(3):
        moved.append(eng.state.theta[i])
    mean = after_one.sum(0) / 3
    for m in moved:
        torch.testing.assert_close(m, (after_one[0] + after_one[1] + after_one[2]) / 3, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(m, mean, rtol=1e-12, atol=1e-12)
    assert not tr.part_count.any() and not tr.part_sum.any()


# -- SWIFT in seconds: wait-free averages with the latest model from each neighbour ---------------
def swift_engine(graph, data, layout, init, seed, cfg, **kw):
    from vecgossip.algorithms.swift import SWIFT
    return algorithm_engine(SWIFT(), graph, data, layout, init, seed, cfg, **kw)


@pytest.mark.parametrize("seed,policy", [(0, "fair"), (1, "fifo")])
def test_swift_in_seconds_matches_the_per_message_twin(seed, policy):
    """Random speeds (1-3 s, a straggler at 3x), uplinks of 0.3-2 s a model, random latency (so
    messages overtake each other and caches go stale), 0.5 s windows, 20 virtual seconds: the same
    models (float64, 1e-10), steps and messages received."""
    import reference.swift_seconds
    graph, data, layout, init = mlp_setting(seed)
    rng = np.random.default_rng(400 + seed)
    size = model_bytes(layout)
    step = rng.uniform(1.0, 3.0, N)
    step[0] *= 3
    up = size / rng.uniform(0.3, 2.0, N)
    lat = rng.uniform(0, 1.0, (N, N))
    clock = seconds_of(step, up, None, lat, policy, 0.5)
    cfg = TickSetting(batch_size=16)
    engine = swift_engine(graph, data, layout, init, seed, cfg, seconds=clock)
    ref = swift_engine(graph, data, layout, init, seed, cfg)
    windows = 40
    for t in range(windows):
        engine.tick(t)
    nbrs = [sorted(graph.to_networkx().neighbors(i)) for i in range(N)]
    want, iters, got = reference.swift_seconds.run(swift_engine(graph, data, layout, init, seed, cfg), ref, nbrs,
                                                   list(step), list(up), list(up), lat.tolist(), size, 0.5, windows,
                                                   policy)
    assert engine.state.iters.tolist() == iters and min(iters) >= 2
    assert engine.transport.received.tolist() == got and min(got) > 0
    assert np.isfinite(engine.transport.latest_time).all()         # every cache heard from its neighbour
    rel = (engine.state.theta - want).norm(dim=1) / want.norm(dim=1)
    assert rel.max() <= 1e-10, rel


def test_swift_average_by_hand():
    """Three nodes on a triangle (W = 1/3 everywhere), instant links, steps of 10 s: at 0 each
    trains and sends; at 10 s each averages its own model with the two it cached, the plain mean
    of the three models after one step (by hand), then trains again."""
    from vecgossip.network.topology import random_regular
    graph = random_regular(3, 2, 0)
    _, data, layout, init6 = mlp_setting(5)
    clock = Seconds(np.full(3, 10.0), np.full(3, np.inf), np.full(3, np.inf), np.zeros((3, 3)), "fair", 1.0)
    eng = swift_engine(graph, data, layout, init6[:3].clone(), 5, TickSetting(batch_size=16), seconds=clock)
    eng.tick(0)
    after = eng.state.theta.clone()
    assert eng.transport.received.tolist() == [2, 2, 2]
    eng.average_latest(np.arange(3), eng.algorithm.weights(eng.a_full))
    for i in range(3):
        torch.testing.assert_close(eng.state.theta[i], (after[0] + after[1] + after[2]) / 3, rtol=1e-12, atol=1e-12)
    # a cache keeps the latest-sent model: an older one arriving later (or in the same batch) is dropped
    tr = eng.transport
    snap = torch.stack([torch.full_like(after[0], 7.0), torch.full_like(after[0], 9.0)])
    tr.latest_in(np.array([0, 0]), np.array([1, 0]), np.array([1, 1]), snap, np.array([30.0, 20.0]))
    k = tr.slot[0, 1]
    assert tr.latest_time[0, k] == 30.0 and (tr.latest[0, k] == 7.0).all()   # row 0, sent at 30
    tr.latest_in(np.array([0]), np.array([1]), np.array([1]), snap, np.array([40.0, 25.0]))
    assert tr.latest_time[0, k] == 30.0 and (tr.latest[0, k] == 7.0).all()   # sent at 25: older, dropped


# -- gossip learning with timers and age-weighted merges -------------------------------------------
def timers_engine(graph, data, layout, init, seed, cfg, **kw):
    from vecgossip.algorithms.gossip_timers import GossipTimers
    return algorithm_engine(GossipTimers(), graph, data, layout, init, seed, cfg, **kw)


@pytest.mark.parametrize("seed,policy", [pytest.param(0, "fair", marks=pytest.mark.slow),   # ~12 s; fair sharing:
                                         (1, "fifo")])                                    # the other twins
def test_gossip_timers_in_seconds_match_the_per_message_twin(seed, policy):
    """Random periods (0.5-2 s), uplinks of 0.2-1.5 s a model, random latency, 0.5 s windows, 20
    virtual seconds: several models reach a node in one period at times; the same models
    (float64, 1e-10), ages, steps and messages received."""
    import reference.gossip_timers_seconds
    (graph, data, layout, init), size, step, up, lat, clock = random_timing(seed, 500, policy=policy)
    cfg = TickSetting(batch_size=16)
    engine = timers_engine(graph, data, layout, init, seed, cfg, seconds=clock)
    ref = timers_engine(graph, data, layout, init, seed, cfg)
    windows = 40
    for t in range(windows):
        engine.tick(t)
    nbrs = [sorted(graph.to_networkx().neighbors(i)) for i in range(N)]
    want, ages, iters, got = reference.gossip_timers_seconds.run(
        timers_engine(graph, data, layout, init, seed, cfg), ref, nbrs, list(step), list(up), list(up),
        lat.tolist(), size, 0.5, windows, policy)
    assert engine.state.iters.tolist() == iters and min(iters) >= 9
    assert engine.transport.received.tolist() == got
    assert engine.state.extra["age"].tolist() == ages
    assert any(a > k for a, k in zip(ages, iters))    # a slow node inherits a faster one's age (max rule)
    rel = (engine.state.theta - want).norm(dim=1) / want.norm(dim=1)
    assert rel.max() <= 1e-10, rel


def test_gossip_timers_age_weighted_merge_by_hand():
    """Two nodes, one link, periods 10 s, instant links: at 0 both (age 0) train (age 1) and send;
    at 10 s each holds the other's model of age 1: x <- (1 x + 1 x_other) / 2, the mean, and age
    max(1, 1) = 1, then trains (age 2). A third merge weight check: own age 3 and one model of age
    1 give (3 x + x_r) / 4."""
    from vecgossip.network.topology import random_regular
    graph = random_regular(2, 1, 0)
    _, data, layout, init6 = mlp_setting(5)
    clock = Seconds(np.full(2, 10.0), np.full(2, np.inf), np.full(2, np.inf), np.zeros((2, 2)), "fair", 1.0)
    eng = timers_engine(graph, data, layout, init6[:2].clone(), 5, TickSetting(batch_size=16), seconds=clock)
    eng.tick(0)
    after = eng.state.theta.clone()
    assert eng.state.extra["age"].tolist() == [1.0, 1.0] and eng.transport.received.tolist() == [1, 1]
    got = eng.merge_parts(np.arange(2), np.array([1.0, 1.0]))
    assert got.tolist() == [1.0, 1.0]
    for i in range(2):
        torch.testing.assert_close(eng.state.theta[i], (after[0] + after[1]) / 2, rtol=1e-12, atol=1e-12)
    x = eng.state.theta.clone()
    tr = eng.transport
    tr.parts_in(np.array([0]), np.array([0]), np.array([0]), after[1:2], torch.zeros(1, x.shape[1], dtype=torch.int8),
                    np.array([[x.shape[1]]]), np.array([1.0]))
    eng.merge_parts(np.array([0]), np.array([3.0]))
    torch.testing.assert_close(eng.state.theta[0], (3 * x[0] + after[1]) / 4, rtol=1e-12, atol=1e-12)
    eng.merge_parts(np.array([1]), np.array([0.0]))                # age 0, nothing received: unchanged
    assert torch.equal(eng.state.theta[1], x[1])


RESUMED = {   # builder, step seconds (linspace over the nodes), policy, what the checkpoint holds
    "adpsgd": ("adpsgd_engine", (1.0, 2.0), "fair", lambda tr: tr.pairs_in_flight),
    "divshare": ("divshare_engine", (1.0, 2.0), "fifo", lambda tr: tr.flow.sender.size and tr.part_count.any()),
    "swift": ("swift_engine", (1.0, 2.0), "fair", lambda tr: tr.flow.sender.size and np.isfinite(tr.latest_time).any()),
    "gossip_timers": ("timers_engine", (0.5, 2.0), "fair", lambda tr: tr.flow.sender.size and tr.part_weight_max.any()),
}


def ticked(engine, ticks):
    for t in ticks:
        engine.tick(t)
    return engine


def resumed_setting(name: str):
    """(build(seed) -> a fresh engine of RESUMED[name]'s setting, its "held" check)."""
    build, (lo, hi), policy, held = RESUMED[name]
    graph, data, layout, init = mlp_setting(6)
    clock = seconds_of(np.linspace(lo, hi, N), up=model_bytes(layout) / 0.7, latency=0.2, policy=policy,
                       resolution=0.5)
    cfg = TickSetting(batch_size=16)
    return (lambda seed: globals()[build](graph, data, layout, init, seed, cfg, seconds=clock)), held


@pytest.mark.parametrize("name", list(RESUMED))
def test_timed_algorithms_resume_with_messages_in_flight_to_the_uninterrupted_run(name):
    """A checkpoint taken at window 9 with messages in flight (and exchanges waiting, fragments or
    models held) resumes into another engine to the uninterrupted run's models, steps, declared
    state and bytes, bit for bit."""
    from vecgossip.engines.tick.state import History
    build, held = resumed_setting(name)
    whole, first = ticked(build(6), range(24)), ticked(build(6), range(9))
    assert held(first.transport)
    saved = first.state_dict(9, History())
    second = build(77)
    t0, _ = second.load_state_dict(saved)
    for t in range(t0, 24):
        second.tick(t)
    assert torch.equal(whole.state.theta, second.state.theta)
    assert torch.equal(whole.state.iters, second.state.iters) and whole.state.iters.min() >= 5
    assert all(torch.equal(v, second.state.extra[k]) for k, v in whole.state.extra.items())
    assert np.array_equal(whole.transport.bytes_sent, second.transport.bytes_sent)


def test_a_compressed_message_holds_the_senders_snapshot_where_sent_and_the_receivers_model_elsewhere():
    """Weight compression in seconds (section III-C2): a message delivered later than it was sent
    fills its unsent elements with the receiver's model at delivery, the sent ones with the
    sender's model at its send (the snapshot). Checked element by element on one sender's
    messages, whatever the masks' generator: every element of a receiver's buffer is one of the
    two, both occur about p of the time, and the buffer's layer variances are those of that model."""
    from vecgossip.core.correction import layer_variance
    graph, data, layout, init = mlp_setting(3)
    cfg = TickSetting(t_acq=(1, 1), R=50, compression=0.4, correction=True, batch_size=16)   # VC: variances kept
    engine = mlp_engine(cfg, graph, data, layout, init, 3, seconds=seconds_of(1.0, up=model_bytes(layout) / 2.5))
    tr = engine.transport
    sender = np.array([2])
    snap = engine.state.theta[2].clone()
    tr.start(sender)                                         # sent at 0: arrives at 2.5 s x fair shares
    engine.state.theta.copy_(torch.randn_like(engine.state.theta))      # every model changes meanwhile
    assert not tr.arrived and tr.flow.sender.size
    tr.run_until(100.0, strict=False)
    tr.receive_arrived()
    recv = np.array(sorted(graph.to_networkx().neighbors(2)))
    total, theta = engine.buffers.total, engine.state.theta
    assert engine.buffers.held.tolist() == np.isin(np.arange(N), recv).astype(float).tolist()
    for r in recv:
        got = total[r]
        sent = torch.isclose(got, snap, rtol=1e-13, atol=1e-15)     # own + (sent - own) at the sent positions
        kept = got == theta[r]
        assert bool((sent | kept).all()), f"receiver {r}: an element neither sent nor its own"
        assert 0.35 < float(sent.double().mean()) < 0.45                # p = 0.4 of ~200,000 elements
        torch.testing.assert_close(engine.buffers.var_total[r], layer_variance(got[None], layout)[0],
                                   rtol=1e-9, atol=1e-12)
    assert float(total[np.setdiff1d(np.arange(N), recv)].abs().max()) == 0.0


def test_gossip_timers_host_ages_follow_a_checkpoint_loaded_into_a_running_engine():
    """The timers keep a host copy of the declared ages (no device read a window); a checkpoint
    loaded into the same engine after it ran on writes the tensor behind that copy's back: the
    copy is re-read, and the run continues as the uninterrupted one, bit for bit."""
    from vecgossip.engines.tick.state import History
    build, _ = resumed_setting("gossip_timers")
    whole, eng = ticked(build(6), range(24)), ticked(build(6), range(9))
    saved = copy.deepcopy(eng.state_dict(9, History()))
    for t in range(9, 16):                      # on past the checkpoint: the ages move on
        eng.tick(t)
    assert not torch.equal(eng.state.extra["age"], saved["extra"]["age"])
    t0, _ = eng.load_state_dict(saved)
    for t in range(t0, 24):
        eng.tick(t)
    assert torch.equal(whole.state.extra["age"], eng.state.extra["age"])
    assert torch.equal(whole.state.theta, eng.state.theta)


def test_arrivals_give_each_message_its_send_and_arrival_time_by_hand():
    """ctx.arrivals (issue 55: what has arrived, with send and arrival times). Every node steps
    every 2 s on the K-regular test graph, every link K M / 0.5 bytes a second, no latency: a step's
    K messages share the sender's uplink and each downlink carries K, so each takes 0.5 s. A node
    reading at its k-th step (2k s) sees its K in-neighbours' models of step k - 1: sent at
    2(k - 1) s, arrived at 2(k - 1) + 0.5 s; at its first step nothing. The unread log is
    checkpointed: a fresh engine loaded with it reads the same."""
    from test_engine import K
    from vecgossip.algorithms import TickAlgorithm

    class Reader(TickAlgorithm):
        arrivals = True

        def __init__(self):
            super().__init__()
            self.seen = {}

        def train(self, ctx, t, nodes):
            self.seen[t] = ctx.arrivals(nodes)
            return ctx.sgd_step(nodes)

        def after_train(self, ctx, t, senders, online):
            ctx.send_models(senders, online, t)
            ctx.average(t, online, 0.5, False)

    graph, data, layout, init = mlp_setting(0)
    size = model_bytes(layout)
    clock = seconds_of(2.0, K * size / 0.5)
    cfg = TickSetting(batch_size=16)
    eng = algorithm_engine(Reader(), graph, data, layout, init, 0, cfg, seconds=clock)
    for t in range(5):
        eng.tick(t)
    seen = eng.algorithm.seen
    assert sorted(seen) == [0, 2, 4] and seen[0]["receiver"].size == 0
    nbrs = graph.to_networkx()
    for t in (2, 4):
        got = seen[t]
        assert got["receiver"].size == N * K
        assert sorted(zip(got["receiver"].tolist(), got["sender"].tolist())) == sorted(
            (i, j) for i in range(N) for j in nbrs.neighbors(i))
        np.testing.assert_allclose(got["sent"], t - 2.0, rtol=0, atol=1e-12)
        np.testing.assert_allclose(got["arrived"], t - 2.0 + 0.5, rtol=1e-12)
    state = eng.transport.state_dict()                     # the 4 s step's messages arrived at 4.5 s, unread
    assert state["arrivals"].shape == (4, N * K)
    other = algorithm_engine(Reader(), graph, data, layout, init, 0, cfg, seconds=clock)
    other.transport.load_state_dict(state)
    again = other.transport.arrivals(np.arange(N))
    np.testing.assert_array_equal(again["arrived"], np.full(N * K, 4.5))
