"""Every system of paper 1 on a tiny graph against hand-computed expectations: weight-compression
fill-in, star averaging, a FedAvg round, broadcast start, the TL peer rule and buffer scaling.
Training is switched off (lr = 0) where a test needs exact, hand-computable models."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import synthetic_dataset, run_of
from test_config import make
from vecgossip.engines.tick.buffer import Buffers
from vecgossip.engines.tick.sparse_send import link_positions
from settings import TickSetting, tick_engine
from vecgossip.network.mixing import SendOperator, adjacency
from vecgossip.models import get_model, make_forward
from vecgossip.core.optim import SGDConfig
from vecgossip.network.peers import Links
from vecgossip.composition.tick import build_engine
from vecgossip.core.state import Layout, ParamSpec, new_state
from vecgossip.network.topology import Graph, build, random_regular

TINY = Layout((ParamSpec("fc.weight", (1, 2), 0, 2), ParamSpec("fc.bias", (1,), 2, 3)))


def frozen_engine(graph, theta, **kw):
    """An MLP-shaped engine whose training does nothing (lr 0, no decay), so only gossip acts."""
    layout = Layout.of(get_model("mlp").factory())
    n = graph.n
    full = torch.zeros(n, layout.size)
    full[:, :theta.shape[1]] = theta
    data = synthetic_dataset(50)
    cfg = TickSetting(**kw)
    eng = tick_engine(cfg, new_state(layout, full), Links(graph, active=cfg.tl is None), make_forward("mlp"),
                     SGDConfig(lr=0.0, weight_decay=0.0, lr_policy="fixed"), data, None,
                     data.images[:10].float(), data.labels[:10], torch.Generator().manual_seed(0),
                     np.random.default_rng(0), test=data)
    return eng


def test_compression_fill_in_matches_per_link_loop():
    """The fused CPU delivery equals, link by link, the receiver's model with the sender's elements
    at the sent positions (link_positions under the key drawn from the generator); the buffer's
    variance sums equal numpy's population variance of those models. (The GPU's path has its own
    twin: tests/test_masked_send.py.)"""
    layout = Layout((ParamSpec("a.weight", (2, 3), 0, 6), ParamSpec("a.bias", (2,), 6, 8),
                     ParamSpec("b.weight", (4,), 8, 12)))
    g = Graph(4, np.array([[0, 1], [1, 2], [0, 2], [2, 3]]))
    theta = torch.randn(4, 12, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    send = SendOperator(adjacency(g), "cpu")
    recv, src = send.edges(np.array([0, 2, 3]))
    buf = Buffers.empty(4, 12, 2, "cpu")
    buf.total, buf.var_total = buf.total.double(), buf.var_total.double()
    buf.receive_compressed(recv, src, theta, 0.5, layout, torch.Generator().manual_seed(5), fused=True)
    key = int(torch.randint(0, 2**62, (1,), generator=torch.Generator().manual_seed(5)))
    keep = np.zeros((recv.numel(), 12), dtype=bool)
    for e in range(recv.numel()):
        keep[e, link_positions(key, e, 12, 0.5)] = True
    want, want_var = np.zeros((4, 12)), np.zeros((4, 2))
    th = theta.numpy()
    for e, (r, s) in enumerate(zip(recv.tolist(), src.tolist())):   # per-link twin
        got = np.where(keep[e], th[s], th[r])
        want[r] += got
        want_var[r] += [got[0:6].var(), got[8:12].var()]
    assert sorted(zip(recv.tolist(), src.tolist())) == [(0, 2), (1, 0), (1, 2), (2, 0), (2, 3), (3, 2)]
    np.testing.assert_allclose(buf.total.numpy(), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(buf.var_total.numpy(), want_var, rtol=1e-10, atol=1e-12)
    assert buf.count.tolist() == [1, 2, 2, 1] == buf.held.tolist()
    assert keep.any() and not keep.all()  # a real mix of sent and filled elements
    lean = Buffers.empty(4, 12, 2, "cpu")    # without correction the variances are not computed
    lean.total = lean.total.double()
    lean.receive_compressed(recv, src, theta, 0.5, layout, torch.Generator().manual_seed(5), variances=False,
                            fused=True)
    assert torch.equal(lean.total, buf.total) and not lean.var_total.any()


def test_fused_positions_are_independent_bernoulli():
    """The fused CPU path's sampler (counter-based draws, table inversion of the gap law): every
    element sent with probability p, independently across links and positions, counts per link
    Binomial(P, p), gaps Geometric(p) (chi-square over 1..12 and the tail); a link's positions
    depend only on (key, link); what deliver_cpu sends is exactly link_positions."""
    links, size = 4000, 64

    def near(count, trials, q):
        return abs(count - trials * q) <= 5 * np.sqrt(trials * q * (1 - q))
    for p in (0.2, 0.55, 0.03):
        mask = np.zeros((links, size), dtype=bool)
        for e in range(links):
            pos = link_positions(12345, e, size, p)
            assert (np.diff(pos) > 0).all() and (pos.size == 0 or (pos[0] >= 0 and pos[-1] < size))
            mask[e, pos] = True
        assert all(near(c, links, p) for c in mask.sum(0)), p                      # each element's marginal
        assert near(mask.sum(), links * size, p)
        assert near((mask[0::2] & mask[1::2]).sum(), links // 2 * size, p * p)      # across links
        assert near((mask[:, :-1:2] & mask[:, 1::2]).sum(), links * size // 2, p * p)   # adjacent elements
        assert abs(mask.sum(1).var() / (size * p * (1 - p)) - 1) < 0.15           # Binomial(P, p) spread
        long = [link_positions(777, e, 400_000, p) for e in range(3)]     # long links: ~1 cut gap per link
        g = np.concatenate([np.diff(np.concatenate([[-1], pos])) for pos in long])
        cells = np.arange(1, 13)
        want = p * (1 - p) ** (cells - 1)
        obs = np.array([(g == c).sum() for c in cells] + [(g > 12).sum()])
        exp = g.size * np.append(want, (1 - p) ** 12)
        chi2 = float(((obs - exp) ** 2 / exp).sum())
        assert chi2 < 40, (p, chi2)                         # 12 dof: P(chi2 > 40) ~ 7e-5
    assert np.array_equal(link_positions(9, 3, 500, 0.3), link_positions(9, 3, 500, 0.3))
    assert not np.array_equal(link_positions(9, 3, 500, 0.3), link_positions(9, 4, 500, 0.3))
    assert not np.array_equal(link_positions(9, 3, 500, 0.3), link_positions(10, 3, 500, 0.3))
    assert link_positions(1, 0, 10_000, 1e-12).size == 0                            # the tail path
    theta = torch.zeros(3, 500)
    theta[0] = 1.0                                           # indicator: what arrives from node 0
    buf = Buffers.empty(3, 500, 1, "cpu")
    recv, send = torch.tensor([1, 2, 1]), torch.tensor([0, 0, 2])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:     # the kernel runs at torch's thread count and leaves it alone (numba's OpenMP layer reset it)
        buf.receive_compressed(recv, send, theta, 0.3, TINY, torch.Generator(), rng=np.random.default_rng(4))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    key = int(np.random.default_rng(4).integers(0, 2**63))
    for e, r in ((0, 1), (1, 2)):
        assert np.array_equal(np.flatnonzero(buf.total[r].numpy()), link_positions(key, e, 500, 0.3))


def test_compression_limits():
    g = Graph(3, np.array([[0, 1], [1, 2], [0, 2]]))
    theta = torch.tensor([[1.0, 2.0, 3.0], [10.0, 20.0, 30.0], [100.0, 200.0, 300.0]])
    send = SendOperator(adjacency(g), "cpu")
    recv, src = send.edges(None)
    nothing = Buffers.empty(3, 3, 1, "cpu")
    nothing.receive_compressed(recv, src, theta, 1e-12, TINY, torch.Generator())
    torch.testing.assert_close(nothing.total, 2 * theta)       # every element filled from the receiver
    everything = Buffers.empty(3, 3, 1, "cpu")
    everything.receive_compressed(recv, src, theta, 1.0, TINY, torch.Generator())
    plain = Buffers.empty(3, 3, 1, "cpu")
    a, c = send.select(None)
    plain.receive(a, c, theta, TINY)
    torch.testing.assert_close(everything.total, plain.total)


def test_star_eq1_averaging():
    """Star(3): centre averages its 3 leaves, each leaf averages the centre's model (beta 0.5)."""
    g = build("star", 3)
    theta = torch.tensor([[0.0, 4.0], [2.0, 2.0], [4.0, 6.0], [6.0, 0.0]])
    eng = frozen_engine(g, theta, beta=0.5)
    eng.tick(0)
    got = eng.state.theta[:, :2]
    # centre: 0.5*[0,4] + 0.5*mean([2,2],[4,6],[6,0]) = [0,2] + [2, 4/3]
    torch.testing.assert_close(got[0], torch.tensor([2.0, 2 + 4 / 3]))
    # leaves: 0.5*own + 0.5*[0,4] (the centre's model as sent, before it averaged)
    torch.testing.assert_close(got[1:], 0.5 * theta[1:] + 0.5 * theta[0])
    assert eng.buffer_size.tolist() == [3, 1, 1, 1]


def test_fedavg_round():
    """Algorithm 1 on the tick clock: clients train (frozen here) and send; the server replaces its
    model by their average and sends it back; the clients replace theirs; the server never trains."""
    g = build("star", 3)
    theta = torch.tensor([[9.0, 9.0], [1.0, 2.0], [3.0, 4.0], [8.0, 0.0]])
    eng = frozen_engine(g, theta, beta=0.0, server=0)
    eng.tick(0)
    avg = torch.tensor([4.0, 2.0])
    for i in range(4):
        torch.testing.assert_close(eng.state.theta[i, :2], avg)
    assert eng.state.iters.tolist() == [0, 1, 1, 1]
    assert eng.next_train[0] > 10**12 and eng.next_train[1:].tolist() == [10, 10, 10]
    row, acc = eng.measure(0)
    assert acc.shape == (1,)                                    # only the server is reported


def test_broadcast_start(data_root):
    eng = build_engine(run_of(make(["model=mlp", "nodes=6", "degree=2", "broadcast_init=true", f"data_root={data_root}"])))
    th = eng.state.theta
    assert torch.equal(th[0], th[5])
    indep = build_engine(run_of(make(["model=mlp", "nodes=6", "degree=2", f"data_root={data_root}"]))).state.theta
    torch.testing.assert_close(th[0], indep.mean(0))            # the average of the independent models


def test_tl_links_add_first_in_name_order_drop_random_and_buffer_scaling():
    g = build("ring", 5)                                         # planned peers: 0:{1,4} 1:{0,2} ...
    links = Links(g, active=False)
    assert links.in_degree().tolist() == [0] * 5 and links.buffer_size(4).tolist() == [0] * 5
    links.add_first(np.array([True, False, True, False, False]))
    assert links.targets[0].tolist() == [1, 4] and links.active[0].tolist() == [True, False]
    assert links.active[2].tolist() == [True, False]             # node 2 adds 1 (before 3)
    assert links.in_degree().tolist() == [0, 2, 0, 0, 0]
    # planned buffer R*k = 4*2 over k = 2 planned peers, times current senders
    assert links.buffer_size(4).tolist() == [0, 8, 0, 0, 0]
    links.add_first(np.array([True, False, False, False, False]))
    assert links.active[0].tolist() == [True, True]
    changed = links.add_first(np.array([True, False, False, False, False]))
    assert not changed[0]                                       # nothing left to add
    m = links.matrix().toarray()
    assert m[1, 0] == 1 and m[4, 0] == 1 and m[0, 1] == 0        # directed: 0 sends, 1 does not yet
    links.drop_random(np.array([True, False, False, False, False]), np.random.default_rng(0))
    assert links.active[0].sum() == 1


def test_tl_buffer_size_follows_current_senders_for_irregular_plans():
    links = Links(build("star", 3), active=True)                  # centre planned 3 senders, R = 1
    links.active[1:, 0] = [True, False, True]                    # two leaves send to the centre
    assert links.buffer_size(1).tolist() == [2, 1, 1, 1]
    assert links.buffer_size(3).tolist() == [6, 3, 3, 3]


def test_tl_engine_starts_without_peers_and_adds_them():
    g = random_regular(6, 2, 0)
    theta = torch.zeros(6, 3)
    tl = __import__("vecgossip.network.peers", fromlist=["TLConfig"]).TLConfig.model_construct(add_at=0.0)  # all add
    eng = frozen_engine(g, theta, tl=tl)
    assert eng.links.active.sum() == 0 and eng.buffer_size.sum() == 0
    eng.tick(0)
    assert eng.t_first_average is None                          # nobody to send to yet
    eng.update_peers(0)                                         # add_at 0: everyone adds one peer
    assert eng.links.active.sum(1).tolist() == [1] * 6
    assert eng.buffer_size.sum().item() == 6                    # R = 1: one slot per current sender
