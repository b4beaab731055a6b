"""Rounds with a per-node barrier in virtual seconds (clock.barrier=node, issue 48's "D-PSGD with a
per-node barrier"): the phases learnt one round at a time agree with the plain per-event twin
that knows them all (tests/reference/barrier.py) on random cases with several gossip steps a
round; a straggler's delay travelling one hop a round by hand (the max-plus recurrence); the
homogeneous k-regular closed form; learning untouched; a checkpoint between rounds with
messages in flight resumes to the same times; the options refused in one line."""
from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
import scipy.sparse as sp

import vecgossip
from reference import barrier as twin
from test_config import make
from vecgossip.composition.root import validate
from vecgossip.core.errors import ConfigError
from vecgossip.engines.clock.barrier import NodeBarrier
from vecgossip.engines.clock.rounds import RoundTimer, messages


def random_case(seed: int):
    rng = np.random.default_rng(seed)
    n, rounds, q = int(rng.integers(3, 8)), int(rng.integers(2, 6)), int(rng.integers(1, 3))
    up = np.array([x if x > 1 else math.inf for x in rng.uniform(0, 10, n)])
    down = np.array([x if x > 1 else math.inf for x in rng.uniform(0, 10, n)])
    lat = np.round(rng.uniform(0, 0.3, (n, n)), 2)
    np.fill_diagonal(lat, 0)
    secs = np.round(rng.uniform(0.1, 2, n), 1)
    plan = []
    for _ in range(rounds):
        steps = rng.integers(0, 3, n).astype(float)            # 0: a client that does not train this round
        phases = []
        for k in range(q):
            a = (rng.uniform(size=(n, n)) < 0.4).astype(float)
            np.fill_diagonal(a, 1)
            phases.append((steps if k == 0 else np.zeros(n), sp.csr_matrix(a), float(rng.choice([0.0, 3.0, 10.0]))))
        plan.append(phases)
    return secs, up, down, lat, plan


def timed(tm: RoundTimer, plan, start: int = 0, stop: int | None = None) -> RoundTimer:
    for phases in plan[start:stop]:
        for steps, w, size in phases:
            tm.round(steps, w, size)
        tm.end_round()
    return tm


@pytest.mark.parametrize("policy", ["fair", "fifo"])
@pytest.mark.parametrize("seed", range(8))
def test_rounds_learnt_one_at_a_time_equal_the_twin_that_knows_them_all(policy, seed):
    secs, up, down, lat, plan = random_case(seed)
    tm = timed(NodeBarrier(secs, up, down, lat, policy), plan)
    assert len(tm.ends) < len(plan)                     # the last round's end waits for the drain
    tm.drain()
    phases = [{"compute": steps * secs, "edges": list(zip(*(x.tolist() for x in messages(w)))), "size": size}
              for round_ in plan for steps, w, size in round_]
    finish = np.array(twin.simulate(phases, list(up), list(down), lat.tolist(), policy))
    q = len(plan[0])
    want = [finish[(r + 1) * q - 1].max() for r in range(len(plan))]
    np.testing.assert_allclose(tm.ends, want, rtol=1e-9, atol=1e-12)
    assert tm.seconds == tm.ends[-1]
    np.testing.assert_allclose(tm.busy, sum(r[0][0] for r in plan) * secs)
    np.testing.assert_allclose(tm.idle, tm.seconds - tm.busy)


def test_a_stragglers_delay_travels_one_hop_a_round_by_hand():
    """Path 0 - 1 - 2, node 0 computes 2 s a round, the others 1 s, 1 s latency, no bandwidth limit.
    A node finishes round r when its own compute is done and its neighbours' round-r models have
    arrived: f_i(r) = max(f_i(r-1) + c_i, max_j f_j(r-1) + c_j + 1), f(-1) = 0:
    f(0) = (2, 3, 2); f(1) = (5, 5, 5); f(2) = (7, 8, 7); f(3) = (10, 10, 10); f(4) = (12, 13, 12):
    the rounds end at 3, 5, 8, 10, 13 (2.5 s a round: the cycle 0 -> 1 -> 0 of (2 + 1) + (1 + 1)
    seconds takes two rounds), where the global barrier waits 3 s every round (15 in all)."""
    w = sp.csr_matrix(np.array([[1, 1, 0], [1, 1, 1], [0, 1, 1]], float))
    lat = np.ones((3, 3)) - np.eye(3)
    args = (np.array([2.0, 1.0, 1.0]), np.full(3, np.inf), np.full(3, np.inf), lat)
    plan = [[(np.ones(3), w, 100.0)]] * 5
    node = timed(NodeBarrier(*args), plan)
    node.drain()
    assert node.ends == [3.0, 5.0, 8.0, 10.0, 13.0]
    np.testing.assert_array_equal(node.node_ends, [[2, 3, 2], [5, 5, 5], [7, 8, 7], [10, 10, 10], [12, 13, 12]])
    np.testing.assert_allclose(node.idle, [13 - 10, 13 - 5, 13 - 5])
    assert timed(RoundTimer(*args), plan).seconds == 15.0


def test_a_homogeneous_k_regular_round_takes_c_plus_k_m_over_b():
    """Ring of 6 (k = 2), compute c = 0.5 s, uplinks B = 4 bytes/s, messages M = 3 bytes, fair
    sharing: every node is in step with its neighbours, so each round takes c + k M / B = 2 s,
    as under the global barrier."""
    n = 6
    a = np.eye(n) + np.roll(np.eye(n), 1, 1) + np.roll(np.eye(n), -1, 1)
    plan = [[(np.ones(n), sp.csr_matrix(a), 3.0)]] * 4
    tm = timed(NodeBarrier(np.full(n, 0.5), np.full(n, 4.0), np.full(n, np.inf), np.zeros((n, n))), plan)
    tm.drain()
    np.testing.assert_allclose(tm.ends, [2.0, 4.0, 6.0, 8.0], rtol=1e-12)


def test_a_checkpoint_between_rounds_resumes_to_the_same_times():
    secs, up, down, lat, plan = random_case(3)
    whole = timed(NodeBarrier(secs, up, down, lat, "fifo"), plan)
    whole.drain()
    half = timed(NodeBarrier(secs, up, down, lat, "fifo"), plan, stop=2)
    assert half.flow.sender.size or (half.phase_of < half.known).any()       # work in flight at the checkpoint
    again = NodeBarrier(secs, up, down, lat, "fifo")
    again.load(pickle.loads(pickle.dumps(half.state())))
    timed(again, plan, start=2).drain()
    assert again.ends == whole.ends and np.array_equal(again.idle, whole.idle)


RUN = ["method=dpsgd", "model=mlp", "data=mnist", "clients=8", "topology=ring", "rounds=6", "eval_every=2",
       "data.global_test_size=100", "data.local_test_size=10", "progress=false", "clock.enabled=true",
       "clock.compute.model=stragglers", "clock.compute.fraction=0.25", "clock.links.uplink=10",
       "clock.links.latency=0.001"]


def test_a_dpsgd_run_with_node_barriers_learns_the_same_models_sooner(data_root, tmp_path):
    """The same run under both barriers: the same metrics but the clock's; the node barrier's rows
    are its timer's round ends (filled in after the rounds measured), no later than the global
    barrier's, and strictly sooner by the end (the stragglers' neighbours run ahead)."""
    runs = {b: vecgossip.run(overrides=[*RUN, f"clock.barrier={b}", f"data_root={data_root}"], run_dir=tmp_path / b)
            for b in ("global", "node")}
    node, glob = runs["node"].metrics, runs["global"].metrics
    for col in set(glob.columns) - {"seconds", "idle_seconds_mean", "wall_seconds"}:
        assert node[col].equals(glob[col]), col
    assert not node["seconds"].isna().any() and not node["idle_seconds_mean"].isna().any()
    assert (node["seconds"] <= glob["seconds"] + 1e-9).all() and node["seconds"].iloc[-1] < glob["seconds"].iloc[-1]
    clock = runs["node"].summary["clock"]
    assert clock["virtual_seconds"] == node["seconds"].iloc[-1]
    assert clock["idle_mean"] == pytest.approx(node["idle_seconds_mean"].iloc[-1], rel=1e-12)
    ends = np.load(tmp_path / "node" / "clock_round_ends.npy")        # every node's end of every round
    rounds = int(runs["node"].summary["rounds_run"])
    assert ends.shape == (rounds, 8) and (np.diff(ends, axis=0) > 0).all()
    np.testing.assert_array_equal(ends.max(axis=1)[node["round"].iloc[1:] - 1], node["seconds"].iloc[1:])
    assert not (tmp_path / "global" / "clock_round_ends.npy").exists()


@pytest.mark.parametrize("args, match", [
    (["clock.enabled=true", "clock.barrier=sometimes"], "clock.barrier"),
    (["clock.barrier=node"], "clock.barrier has no effect without clock.enabled=true"),
    (["clock.enabled=true", "clock.barrier=node", "clock.churn.model=bernoulli"],
     "clock.barrier=node with clock.churn.model=bernoulli"),
])
def test_bad_barrier_options_are_one_line(args, match):
    overrides = [*RUN[:10], *args]
    with pytest.raises((ConfigError, ValueError), match=match) as err:
        validate(make(overrides), overrides)
    assert "\n" not in str(err.value)


def test_the_tick_engine_refuses_a_barrier_in_one_line():
    overrides = ["method=vc", "model=mlp", "data=mnist", "nodes=8", "degree=2", "max_ticks=20", "clock.enabled=true",
                 "clock.barrier=node"]
    match = "clock.barrier=node has no effect on the tick engine"
    with pytest.raises((ConfigError, ValueError), match=match) as err:
        validate(make(overrides), overrides)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("policy", ["fair", "fifo"])
def test_the_compiled_event_loop_equals_the_step_by_step_one(policy, monkeypatch):
    """The per-node barrier's events (the nodes' and their transfers') run in one compiled call
    (issue 56, barrier_kernel): on 40 random cases, up to 30 nodes and 3 gossip steps a round, every
    round's end, every node's phase ends and the bytes agree with the event-by-event loop."""
    for seed in range(40):
        rng = np.random.default_rng(1000 + seed)
        secs, up, down, lat, plan = random_case(seed)
        n = int(rng.integers(3, 31))
        if n > secs.size:                        # a larger graph of the same kind
            secs, up, down = (np.resize(a, n) for a in (secs, up, down))
            lat = np.round(rng.uniform(0, 0.3, (n, n)), 2)
            np.fill_diagonal(lat, 0)
            plan = [[(np.resize(steps, n), sp.csr_matrix((rng.uniform(size=(n, n)) < 0.2) | np.eye(n, dtype=bool),
                                                         dtype=float), size) for steps, _, size in phases]
                    for phases in plan]
        got = {}
        for compiled in (True, False):
            monkeypatch.setattr(NodeBarrier, "compiled", compiled)
            tm = timed(NodeBarrier(secs, up, down, lat, policy), plan)
            tm.drain()
            got[compiled] = tm
        a, b = got[True], got[False]
        np.testing.assert_allclose(a.ends, b.ends, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(np.array(a.node_ends), np.array(b.node_ends), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(a.idle, b.idle, rtol=1e-12, atol=1e-12)
