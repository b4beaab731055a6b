"""Incremental exact max-min sharing and the compiled round loop (issue 56), against independent
references: the from-scratch progressive filling (tests/reference/fair_filling.py, the allocation
every earlier clock test checked) after random starts, ends and aborts; the Transfers event loop
(clock/event_round.py) for whole rounds with nodes leaving; a hand case for the greedy policy
(sacs-epfl's BWScheduler rules)."""
from __future__ import annotations

import numpy as np
import pytest

from vecgossip.engines.clock.event_round import transfers_round
from vecgossip.engines.clock.maxmin import TOL, Workspace, share_local
from vecgossip.engines.clock.rounds import round_fates
from reference.fair_filling import fair_rates
from vecgossip.engines.clock.transfers import Transfers


def scratch(flow: Transfers) -> np.ndarray:
    """The rates from scratch: progressive filling over the transfers sharing the links now
    (fifo: each uplink's oldest still sending)."""
    sending = np.isnan(flow.sent_at)
    carried = sending.copy()
    if flow.policy == "fifo":
        carried[:] = False
        for s in np.unique(flow.sender[sending]):
            mine = np.flatnonzero(sending & (flow.sender == s))
            carried[mine[np.argmin(flow.seq[mine])]] = True
    out = np.zeros(flow.sender.size)
    out[carried] = fair_rates(flow.sender[carried], flow.receiver[carried], flow.uplink, flow.downlink)
    return out


def compiled_rates(flow: Transfers) -> np.ndarray:
    """The rates the compiled loop shares now (run to the present on a copy of ``flow``)."""
    twin = Transfers(flow.uplink, flow.downlink, flow.policy)
    twin.load(flow.state())
    twin._rate, twin._carried = flow._rate.copy(), flow._carried.copy()
    twin.run_until(twin.now, strict=True)
    return twin._rate


@pytest.mark.parametrize("policy", ["fair", "fifo"])
def test_incremental_sharing_equals_filling_from_scratch_after_random_changes(policy):
    """300 random histories of 6-12 nodes (capacities 1-5 B/s or unlimited): transfers start in
    batches, time moves on (their last bytes leave, they are delivered), some are aborted; after
    every change the incremental rates (the step-by-step methods' and the compiled loop's, from
    the same state) equal the from-scratch filling to 1e-9 (relative)."""
    rng = np.random.default_rng(0)
    checks = 0
    for case in range(300):
        n = int(rng.integers(6, 13))
        up = rng.choice([1.0, 2.0, 3.5, 5.0, np.inf], n)
        down = rng.choice([1.0, 2.0, 4.0, np.inf], n)
        flow = Transfers(up, down, policy)
        for _ in range(int(rng.integers(3, 9))):
            k = int(rng.integers(1, 6))
            s, r = rng.integers(0, n, k), rng.integers(0, n, k)
            flow.start(s, r, rng.choice([0.5, 1.0, 3.0, 7.0], k), rng.choice([0.0, 0.2], k), np.arange(k))
            np.testing.assert_allclose(flow.rate, scratch(flow), rtol=1e-9, atol=1e-12)
            flow.advance(flow.now + float(rng.choice([0.1, 0.7, 2.0])))
            np.testing.assert_allclose(flow.rate, scratch(flow), rtol=1e-9, atol=1e-12)
            flow.remove(flow.delivered())
            if flow.sender.size and rng.random() < 0.5:                      # aborts: a node goes
                flow.remove(flow.involving(np.array([int(rng.integers(0, n))])))
            np.testing.assert_allclose(compiled_rates(flow), scratch(flow), rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(flow.rate, scratch(flow), rtol=1e-9, atol=1e-12)
            checks += 4
    assert checks > 3000


def link_csr(up: np.ndarray, down: np.ndarray, links: int) -> tuple[np.ndarray, np.ndarray]:
    """Every link's flows, by numpy (independent of the kernel's own CSR)."""
    link = np.concatenate([up, down])
    flow = np.concatenate([np.arange(up.size)] * 2)
    ptr = np.concatenate([[0], np.cumsum(np.bincount(link, minlength=links))]).astype(np.int64)
    return ptr, flow[np.argsort(link, kind="stable")].astype(np.int64)


@pytest.mark.parametrize("links", ["mixed", "divshare", "uniform"])
def test_local_sharing_equals_filling_from_scratch_over_long_histories(links):
    """share_local (only the links a change reaches) after every one of 40 random changes (a
    flow starts, ends, or a node's flows are all aborted, one to three at once), each change
    applied to the previous change's output (rounding carried along), on 150 random systems of 4-40
    nodes sending to 1-4 others: mixed capacities with unlimited links, DivShare's (a few slow
    uplinks and downlinks), or all equal (every rate tied): the from-scratch filling's rates to 1e-9."""
    rng = np.random.default_rng({"mixed": 3, "divshare": 4, "uniform": 5}[links])
    checks, touched, carried_total = 0, 0, 0
    for case in range(150):
        n = int(rng.integers(4, 41))
        d = int(rng.integers(1, min(4, n - 1) + 1))
        s = np.repeat(np.arange(n), d)
        r = np.array([rng.choice(np.delete(np.arange(n), i), d, replace=False) for i in range(n)]).ravel()
        if links == "mixed":
            upc, dnc = rng.choice([1.0, 2.0, 3.5, 5.0, np.inf], n), rng.choice([1.0, 2.0, 4.0, np.inf], n)
        elif links == "divshare":
            upc = np.where(rng.random(n) < 7 / 60, rng.uniform(10, 13, n), 60.0) / 8
            dnc = np.where(rng.random(n) < 7 / 60, rng.uniform(10, 13, n), 60.0) / 8
        else:
            upc = dnc = np.full(n, 7.5)
        f = s.size
        up, down, cap = s.astype(np.int64), (n + r).astype(np.int64), np.concatenate([upc, dnc])
        ptr, idx = link_csr(up, down, 2 * n)
        carried = rng.random(f) < 0.7
        rate = np.zeros(f)
        rate[carried] = fair_rates(s[carried], r[carried], upc, dnc)
        ws = Workspace(2 * n, f)
        for _ in range(40):
            new = carried.copy()
            kind = rng.integers(0, 3)
            if kind == 0 and (~carried).any():                     # starts
                go = rng.choice(np.flatnonzero(~carried), min(int(rng.integers(1, 4)), int((~carried).sum())),
                                replace=False)
                new[go] = True
            elif kind == 1 and carried.any():                      # ends
                go = rng.choice(np.flatnonzero(carried), min(int(rng.integers(1, 4)), int(carried.sum())),
                                replace=False)
                new[go] = False
            else:                                                  # a node goes: its flows aborted
                node = int(rng.integers(0, n))
                new &= (s != node) & (r != node)
            ended, fresh = carried & ~new, new & ~carried
            if not (ended.any() or fresh.any()):
                continue
            level0 = 0.0 if fresh.any() else float(rate[ended].min())
            seeds = np.concatenate([up[ended | fresh], down[ended | fresh]])
            rate = np.where(fresh, np.nan, rate)
            m = share_local(up, down, new, rate, fresh, cap, ptr, idx, seeds, seeds.size, level0, *ws.arrays(), TOL)
            rate[~new] = 0.0
            want = np.zeros(f)
            want[new] = fair_rates(s[new], r[new], upc, dnc)
            np.testing.assert_allclose(rate, want, rtol=1e-9, atol=1e-12)
            assert not (ws.dirty.any() or ws.assigned.any() or ws.lcnt.any())      # the workspace left clean
            carried = new
            checks += 1
            touched += m
            carried_total += int(new.sum())
    assert checks > 4000
    assert touched < carried_total          # it re-shares a part of the flows, not all of them


@pytest.mark.parametrize("policy", ["fair", "fifo"])
def test_the_compiled_round_equals_the_transfers_event_loop(policy):
    """300 random barrier rounds (2-8 nodes, random graphs, sizes 0-4 B, latencies 0-0.3 s, a
    third of the nodes leaving at random times): the compiled loop and the Transfers loop agree
    on the round's end, every node's done time (1e-9), which messages arrived and who was cut off."""
    rng = np.random.default_rng(1)
    for case in range(300):
        n = int(rng.integers(2, 9))
        pairs = [(i, j) for i in range(n) for j in range(n) if i != j and rng.random() < 0.5]
        if not pairs:
            continue
        s, r = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
        args = (rng.choice([0.0, 0.5, 1.0, 2.0], n), s, r, rng.choice([0.0, 1.0, 2.5, 4.0], s.size),
                rng.choice([1.0, 2.0, np.inf], n), rng.choice([1.0, 3.0, np.inf], n),
                rng.choice([0.0, 0.1, 0.3], (n, n)), policy,
                np.where(rng.random(n) < 0.3, rng.uniform(0, 4, n), np.inf))
        got, want = round_fates(*args), transfers_round(*args)
        assert got.end == pytest.approx(want[0], rel=1e-9), case
        np.testing.assert_allclose(got.done, want[1], rtol=1e-9)
        assert (got.arrived == want[2]).all() and (got.gone == want[4]).all(), case


@pytest.mark.parametrize("policy", ["fair", "fifo"])
def test_the_compiled_round_equals_the_transfers_event_loop_on_dense_rounds(policy):
    """12 rounds of 40 nodes, each sending to 10 random others over heterogeneous links: many rate
    changes per transfer (the compiled loop's heap of last bytes fills with stale entries and is
    rebuilt), the same ends and done times as the Transfers loop."""
    rng = np.random.default_rng(2)
    n = 40
    for case in range(12):
        s = np.repeat(np.arange(n), 10)
        r = np.array([rng.choice(np.delete(np.arange(n), i), 10, replace=False) for i in range(n)]).ravel()
        args = (rng.uniform(0, 0.3, n), s, r, rng.uniform(0.5, 2.0, s.size), rng.choice([1.0, 5.0, 20.0], n),
                rng.choice([2.0, 8.0, np.inf], n), np.full((n, n), 0.01), policy, None)
        got, want = round_fates(*args), transfers_round(*args)
        assert got.end == pytest.approx(want[0], rel=1e-9), case
        np.testing.assert_allclose(got.done, want[1], rtol=1e-9)


def test_greedy_keeps_a_first_allocation_where_fair_sharing_re_shares():
    """Node A (uplink 2 B/s) sends 1 B to D (downlink 1) then 4 B to C (downlink 2). Greedy: A -> D
    gets min(2, 1) = 1, A -> C the 1 left; when A -> D ends at 1 s, only D's other transfers may
    gain (none): A -> C stays at 1 B/s and ends at 4 s. Fair sharing gives A -> C A's whole uplink
    from 1 s: 1 + 3 / 2 = 2.5 s. FIFO sends them one after the other: 1 + 4 / 2 = 3 s."""
    inf = np.inf
    up, down = np.array([2.0, inf, inf]), np.array([inf, 2.0, 1.0])
    ends = {p: round_fates(np.zeros(3), np.array([0, 0]), np.array([2, 1]), np.array([1.0, 4.0]), up, down,
                           np.zeros((3, 3)), p).end for p in ("fair", "fifo", "greedy")}
    assert ends == {"fair": 2.5, "fifo": 3.0, "greedy": 4.0}


def test_greedy_hands_a_receivers_freed_downlink_to_a_waiting_request():
    """A and B (uplinks 1) both send to C (downlink 1), A's request first: A -> C gets 1 B/s, B's
    request waits at C; when A -> C's last byte leaves at 1 s, C tells B, whose 2 B then take 2 s."""
    one = np.ones(3)
    out = round_fates(np.zeros(3), np.array([0, 1]), np.array([2, 2]), np.array([1.0, 2.0]), one, one,
                      np.zeros((3, 3)), "greedy")
    assert out.end == 3.0 and out.done[2] == 3.0


def flat(out) -> list[tuple[int, float]]:
    return [(int(q), float(t)) for _, tags, t, _ in out for q in tags]


@pytest.mark.parametrize("policy", ["fair", "fifo"])
def test_scheduled_starts_in_the_compiled_loop_equal_starts_one_time_after_another(policy):
    """The tick engine's windows (issue 56): every message of a window scheduled ahead and run by
    the compiled loop in one call (Transfers.schedule, run_until) against the step-by-step
    methods with each start made at its time (advance to it, start, then on): 300 random histories
    of 2-7 nodes over 6 windows, each sender's 1-3 messages leaving at one time (FIFO serves them
    in the order given), sizes, send times and latencies drawn continuously otherwise: the same
    deliveries in the same order at the same times (1e-9)."""
    rng = np.random.default_rng(6)
    for case in range(300):
        n = int(rng.integers(2, 8))
        up, down = rng.choice([1.0, 2.0, np.inf], n), rng.choice([1.0, 3.0, np.inf], n)
        compiled, steps = Transfers(up, down, policy), Transfers(up, down, policy)
        got, want, end = [], [], 0.0
        for w in range(6):
            sends = int(rng.integers(1, 4))                     # a node's messages leave at one time
            fan = rng.integers(1, 4, sends)
            k = int(fan.sum())
            at = np.repeat(np.sort(end + rng.uniform(0, 1, sends)), fan)
            s, r = np.repeat(rng.integers(0, n, sends), fan), rng.integers(0, n, k)
            size, lat, tag = rng.uniform(0, 3, k), rng.uniform(0, 0.4, k) * (rng.random(k) < 0.7), 10 * w + np.arange(k)
            compiled.schedule(at, s, r, size, lat, tag)
            for tau in np.unique(at):
                go = at == tau
                want += flat(steps._run_steps(tau, strict=False))
                steps.start(s[go], r[go], size[go], lat[go], tag[go])
            end += 1.0
            got += flat(compiled.run_until(end, strict=True))
            want += flat(steps._run_steps(end, strict=True))
        assert [g[0] for g in got] == [w_[0] for w_ in want], case
        np.testing.assert_allclose([g[1] for g in got], [w_[1] for w_ in want], rtol=1e-9)


def test_greedy_reads_only_the_rates_that_changed(monkeypatch):
    """The greedy policy's rates are updated only where the scheduler changed an allocation (and for
    new transfers): after every sharing of 20 random rounds (heterogeneous links, nodes sending to
    several receivers) they equal every transfer's allocation read anew (0 once sent)."""
    from vecgossip.engines.clock.transfers import Transfers
    share, checked = Transfers._share_greedy, []

    def checked_share(self):
        share(self)
        whole = np.array([self._greedy.rate(int(q)) for q in self.seq]) * np.isnan(self.sent_at)
        assert np.array_equal(self._rate, whole)
        checked.append(self._rate.size)
    monkeypatch.setattr(Transfers, "_share_greedy", checked_share)
    rng = np.random.default_rng(9)
    for case in range(20):
        n = int(rng.integers(3, 9))
        k = int(rng.integers(1, n))
        s = np.repeat(np.arange(n), k)
        r = np.array([rng.choice(np.delete(np.arange(n), i), k, replace=False) for i in range(n)]).ravel()
        round_fates(rng.uniform(0, 0.3, n), s, r, rng.uniform(0.5, 2.0, s.size), rng.choice([1.0, 5.0, 20.0], n),
                    rng.choice([2.0, 8.0, np.inf], n), np.full((n, n), 0.01), "greedy")
    assert len(checked) > 100 and max(checked) > 10
