"""The wall clock's parts (issue 48, first step: models of compute, links, transfers and churn
traces, and the event heap; the engine that runs algorithms on them is not built yet). Checked
against a plain per-event twin (tests/reference/clock.py) on random cases, against the closed
form of a homogeneous synchronous round, against FedScale's completion-time formula evaluated by
hand, and against hand cases."""
from __future__ import annotations

import math

import numpy as np
import pytest

from reference import clock as twin
from vecgossip.engines.clock import compute, links, traces
from vecgossip.engines.clock.events import Heap
from reference.fair_filling import fair_rates
from vecgossip.engines.clock.transfers import Transfers


def run_transfers(starts: list[dict], up, down, policy: str) -> list[tuple[float, int]]:
    """The vectorized Transfers driven event by event: (time, tag) of each delivery."""
    t = Transfers(np.array(up), np.array(down), policy)
    pending = sorted(range(len(starts)), key=lambda i: (starts[i]["time"], i))
    out = []
    while pending or t.sender.size:
        nxt = min(starts[pending[0]]["time"] if pending else math.inf, t.next_event())
        t.advance(nxt)
        done = t.delivered()
        out += [(t.now, int(tag)) for tag in t.tag[done]]
        t.remove(done)
        batch = []
        while pending and starts[pending[0]]["time"] <= t.now:
            batch.append(starts[pending.pop(0)])
        if batch:
            t.start([b["sender"] for b in batch], [b["receiver"] for b in batch], [b["size"] for b in batch],
                    [b["latency"] for b in batch], [b["tag"] for b in batch])
            done = t.delivered()                     # zero bytes and zero latency: delivered at once
            out += [(t.now, int(tag)) for tag in t.tag[done]]
            t.remove(done)
    return out


@pytest.mark.parametrize("policy", ["fair", "fifo"])
@pytest.mark.parametrize("seed", range(6))
def test_transfers_equal_the_per_event_twin(policy, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 8))
    up = [float(x) if x > 0.15 else math.inf for x in rng.uniform(0, 10, n)]
    down = [float(x) if x > 0.15 else math.inf for x in rng.uniform(0, 10, n)]
    starts = []
    for tag in range(int(rng.integers(5, 25))):
        s, r = rng.choice(n, 2, replace=False)
        starts.append({"time": float(np.round(rng.uniform(0, 5), 1)), "sender": int(s), "receiver": int(r),
                       "size": float(rng.choice([0.0, *rng.uniform(1, 30, 5)])),
                       "latency": float(rng.choice([0.0, 0.05, 0.3])), "tag": tag})
    got = run_transfers(starts, up, down, policy)
    want = twin.simulate(starts, up, down, policy)
    assert len(want) == len(starts) and len({w[0] for w in want}) > 3      # every message, at several times
    assert [g[1] for g in got] == [w[1] for w in want]
    np.testing.assert_allclose([g[0] for g in got], [w[0] for w in want], rtol=1e-9, atol=1e-12)


def test_a_homogeneous_synchronous_round_takes_c_plus_k_m_over_b():
    """D-PSGD on a k-regular graph: every node computes for c seconds, then sends its model (M
    bytes) to its k neighbours at once over an uplink of B bytes/s (downlinks B): under fair
    sharing each send gets B / k, the round ends at c + k M / B (relative 1e-9)."""
    n, k, m_bytes, b, c = 12, 4, 431_080 * 4, 60e6 / 8, 0.37
    step = compute.step_seconds(compute.ComputeConfig(model="constant", seconds=c), n, 64, np.random.default_rng(0))
    senders = np.repeat(np.arange(n), k)
    receivers = (senders + np.tile([1, 2, n - 1, n - 2], n)) % n
    t = Transfers(np.full(n, b), np.full(n, b))
    t.advance(float(step.max()))
    t.start(senders, receivers, m_bytes, 0.0, np.arange(senders.size))
    end = t.next_event()
    t.advance(end)
    assert t.delivered().size == n * k
    assert math.isclose(end, c + k * m_bytes / b, rel_tol=1e-9)


def test_fair_rates_by_hand_and_max_min_property():
    # 0->2, 0->3, 1->3; uplinks 10, 10; node 3's downlink 4: 3's two flows get 2 each, 0->2 the rest of 0's uplink
    got = fair_rates(np.array([0, 0, 1]), np.array([2, 3, 3]), np.array([10.0, 10.0, 10.0, 10.0]),
                     np.array([np.inf, np.inf, np.inf, 4.0]))
    assert got.tolist() == [8.0, 2.0, 2.0]
    rng = np.random.default_rng(3)
    for _ in range(20):
        n, f = 6, 15
        s, r = rng.integers(0, n, f), rng.integers(0, n, f)
        up, down = rng.uniform(1, 10, n), rng.uniform(1, 10, n)
        rate = fair_rates(s, r, up, down)
        used_up, used_down = np.bincount(s, rate, n), np.bincount(r, rate, n)
        assert (used_up <= up * (1 + 1e-9)).all() and (used_down <= down * (1 + 1e-9)).all()
        for i in range(f):   # max-min: a flow's bottleneck is full and it has the largest rate there
            full_up = used_up[s[i]] >= up[s[i]] * (1 - 1e-9) and rate[i] >= rate[s == s[i]].max() * (1 - 1e-9)
            full_down = used_down[r[i]] >= down[r[i]] * (1 - 1e-9) and rate[i] >= rate[r == r[i]].max() * (1 - 1e-9)
            assert full_up or full_down


def test_fifo_uplinks_send_one_transfer_at_a_time_in_order():
    t = Transfers(np.array([10.0, np.inf]), np.array([np.inf, np.inf]), "fifo")
    t.start([0, 0, 0], [1, 1, 1], [10.0, 20.0, 5.0], 0.0, [7, 8, 9])
    assert t.rate.tolist() == [10.0, 0.0, 0.0]
    times = []
    while t.sender.size:
        t.advance(t.next_event())
        d = t.delivered()
        times += [(t.now, int(x)) for x in t.tag[d]]
        t.remove(d)
    assert times == [(1.0, 7), (3.0, 8), (3.5, 9)]


def test_an_aborted_transfer_frees_its_share():
    t = Transfers(np.array([10.0, 10.0]), np.array([np.inf, np.inf]))
    t.start([0, 0], [1, 1], [10.0, 10.0], 0.0, [1, 2])
    t.advance(1.0)                                        # 5 bytes each sent
    t.remove(t.involving(np.array([1]))[t.tag[t.involving(np.array([1]))] == 2])
    assert t.rate.tolist() == [10.0] and math.isclose(t.next_event(), 1.5)


def test_fedscale_completion_time_formula_by_hand():
    """FedScale's ClientMetadata.get_completion_time for a device of 50 ms a sample and 1,000
    kbps, batch 20, 5 local steps, a model of 431,080 float32 parameters pulled and pushed
    (kbit = bytes x 8 / 1024): computation 3 x 20 x 5 x 50 / 1000 = 15 s, communication
    2 x 13,471.25 kbit / 1,000 kbps = 26.9425 s."""
    kbit = 431_080 * 4 * 8 / 1024
    assert kbit == 13_471.25
    assert compute.fedscale_computation(50.0, 20, 5) == 15.0
    assert math.isclose(compute.fedscale_communication(kbit, kbit, 1000.0), 26.9425, rel_tol=1e-15)
    devices = {0: {"computation": 50.0, "communication": 1000.0}}
    got = compute.step_seconds(compute.ComputeConfig(model="trace"), 3, 20, np.random.default_rng(0), devices)
    assert got.tolist() == [3.0] * 3                      # one step of batch 20: 3 x 20 x 50 / 1000


def test_compute_models_hold_their_means_and_counts():
    rng = np.random.default_rng(0)
    cfg = compute.ComputeConfig
    assert compute.step_seconds(cfg(model="constant", seconds=0.2), 4, 64, rng).tolist() == [0.2] * 4
    logn = compute.step_seconds(cfg(model="lognormal", seconds=0.2, sigma=0.5), 200_000, 64, rng)
    assert abs(logn.mean() / 0.2 - 1) < 0.01 and abs(np.log(logn).std() - 0.5) < 0.01
    par = compute.step_seconds(cfg(model="pareto", seconds=0.2, shape=3.0), 400_000, 64, rng)
    assert abs(par.mean() / 0.2 - 1) < 0.01 and math.isclose(par.min(), 0.2 * 2 / 3, rel_tol=1e-3)
    slow = compute.step_seconds(cfg(model="stragglers", seconds=0.2, fraction=0.25, slowdown=8), 60, 64, rng)
    assert (slow == 1.6).sum() == 15 and (slow == 0.2).sum() == 45
    with pytest.raises(Exception):
        cfg(model="pareto", shape=1.0)


def test_divshare_bandwidth_groups_and_latency_matrices(tmp_path):
    spec = links.LinksConfig.model_validate({"uplink": [{"nodes": 53, "mbps": 60.0},
                                                        {"nodes": 7, "mbps": (10.0, 13.0)}]}).uplink
    bw = links.bandwidth(spec, 60, np.random.default_rng(1))
    assert (bw == 60e6 / 8).sum() == 53
    slow = bw[bw < 60e6 / 8]
    assert slow.size == 7 and (slow >= 10e6 / 8).all() and (slow <= 13e6 / 8).all()
    with pytest.raises(ValueError, match="hold 60 nodes, the run has 61"):
        links.bandwidth(spec, 61, np.random.default_rng(1))
    assert np.isinf(links.bandwidth(None, 3, np.random.default_rng(0))).all()
    (tmp_path / "lat.txt").write_text("# ms\n0, 10, 20\n10, 0, 30\n20, 30, 0\n")
    lat = links.latency_matrix(str(tmp_path / "lat.txt"), 4)
    assert lat[0, 2] == 0.02 and lat[1, 3] == 0.01 and lat[3, 0] == 0.0 and lat[3, 3] == 0.0
    assert links.latency_matrix(0.001, 2).tolist() == [[0.0, 0.001], [0.001, 0.0]]
    (tmp_path / "bad.txt").write_text("0 1\n")
    with pytest.raises(ValueError, match="square"):
        links.latency_matrix(str(tmp_path / "bad.txt"), 2)


def test_traces_are_written_and_read_in_fedscales_formats(tmp_path):
    paths = traces.write_examples(tmp_path, n=8, seed=2)
    cap = traces.read(paths["capacity"])
    traces.check_capacity(cap)
    assert sorted(cap) == list(range(8))
    behave = traces.read(paths["behaviour"])
    entry = behave[3]
    a, b = entry["active"][0], entry["inactive"][0]
    assert traces.online(entry, (a + b) / 2) and traces.online(entry, a + entry["finish_time"])   # it repeats
    on = traces.online({"active": [10.0, 50.0], "inactive": [20.0, 60.0], "finish_time": 100.0},
                       np.array([5.0, 10.0, 15.0, 30.0, 55.0, 115.0, 161.0]))
    assert on.tolist() == [False, True, True, False, True, True, False]
    assert links.latency_matrix(str(paths["latency"]), 8).shape == (8, 8)
    with pytest.raises(FileNotFoundError):
        traces.read(tmp_path / "nope.pkl")


def test_the_heap_pops_by_time_then_push_order_and_in_waves():
    h = Heap()
    h.push(2.0, "arrive", 1)
    h.push(1.0, "train", 0)
    h.push(1.0, "train", 5)
    h.push(1.0000004, "send", 3)
    h.push(3.0, "train", 2)
    again = Heap.load(h.state())
    assert [(e.kind, e.node) for e in h.wave(0.0)] == [("train", 0), ("train", 5)]
    assert [e.node for e in h.wave(1e-6)] == [3]
    assert [e.node for e in h.wave(1.5)] == [1, 2]
    assert len(h) == 0 and h.peek() == math.inf
    assert [e.node for e in again.wave(1e-6)] == [0, 5, 3]


def test_a_tiled_latency_equals_its_dense_matrix():
    """Latency holds the tile (issue 56: O(k^2), not O(n^2)); its pairs, ``any`` and the dense
    matrix are the tiled matrix's, written out here by hand: a 2 x 2 tile over 5 nodes."""
    lat = links.Latency(np.array([[0.5, 1.0], [2.0, 0.0]]), 5)
    dense = np.array([[0, 1, .5, 1, .5], [2, 0, 2, 0, 2], [.5, 1, 0, 1, .5], [2, 0, 2, 0, 2], [.5, 1, .5, 1, 0]])
    np.testing.assert_array_equal(np.asarray(lat), dense)
    s, r = np.array([0, 1, 4, 3, 2]), np.array([2, 3, 0, 3, 4])
    np.testing.assert_array_equal(lat[s, r], dense[s, r])
    assert lat.any() and not links.Latency(np.zeros((1, 1)), 1000).any()
    assert not links.Latency(np.array([[0.0, 0.0], [0.0, 3.0]]), 3).any()      # node 1 to itself only: unused
    assert links.Latency(np.array([[0.0, 0.0], [0.0, 3.0]]), 4).any()          # nodes 1 -> 3 share site 1
