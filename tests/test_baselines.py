"""Issue 24: the field's baselines, each one file on the public algorithm interface, against a
plain per-node loop twin (nn.Modules, autograd, Python loops over W_ij written here) on 5-6 nodes
over 2-3 rounds in float64, plus the property tests their papers state: CHOCO-SGD (identity
compression with gamma = 1 is D-PSGD; the consensus step keeps the average), gradient tracking
(mean y = mean g every round; the exact minimiser of a heterogeneous quadratic where D-PSGD stays
biased), QG-DSGDm, SGP (D-PSGD on a symmetric W; sum x and sum w conserved on a digraph, also
under message loss), Epidemic Learning (EL-Local / EL-Oracle matrices, averaging what arrived),
AD-PSGD on the tick clock (pairs applied in node order)."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import faults_of, run_of
import torch

import reference.adpsgd
import reference.choco
import reference.epidemic
import reference.gradient_tracking
import reference.qgm
import reference.sgp
import vecgossip
from reference.common import Twin, ring_w, top_k

sys.path.insert(0, str(Path(__file__).resolve().parent / "golden"))
import cases  # noqa: E402  (the synthetic data set "golden", registered through the public API)

COMMON = ["data.name=golden", "precision=fp64", "progress=false", "model=mlp", "checkpoint_seconds=null"]
ROUNDS = [*COMMON, "clients=5", "rounds=3", "eval_every=1", "data.batch_size=8", "data.local_test_size=10",
          "data.global_test_size=40", "data.min_samples=5", "topology=ring"]
TOL = 1e-10


def build(overrides):
    from vecgossip.composition import rounds
    cases.register()
    cfg = vecgossip.compose(overrides=[*ROUNDS, *overrides])
    return cfg, rounds.build_engine(run_of(cfg))


def run_and_compare(engine, want: list[torch.Tensor], tol: float = TOL) -> None:
    engine.run(progress=False)
    want = torch.stack(want)
    rel = (engine.state.theta - want).norm(dim=1) / want.norm(dim=1)
    assert rel.max() < tol, rel


# -- CHOCO-SGD ----------------------------------------------------------------------------------
@pytest.mark.parametrize("extra", [[], ["faults.drop=0.3", "faults.offline=0.2"]], ids=["plain", "faults"])
def test_choco_matches_its_loop_twin(extra):
    cfg, engine = build(["method=choco", "algorithm.gamma=0.5", "algorithm.fraction=0.1", *extra])
    xs = reference.choco.run(cfg, engine, gamma=0.5, fraction=0.1)
    run_and_compare(engine, xs)
    if extra:
        assert engine.faults.lost > 0


def test_choco_with_identity_and_gamma_one_is_dpsgd():
    _, choco = build(["method=choco", "algorithm.compressor=identity", "algorithm.gamma=1.0"])
    _, dpsgd = build(["method=dpsgd"])
    choco.run(progress=False)
    dpsgd.run(progress=False)
    assert torch.allclose(choco.state.theta, dpsgd.state.theta, rtol=0, atol=1e-12)


@pytest.mark.parametrize("compressor", ["top_k", "rand_k", "qsgd", "sign"])
def test_choco_consensus_step_keeps_the_average(compressor):
    """1^T (W - I) = 0: the step x += gamma (W x_hat - x_hat) moves no node-average."""
    _, e = build(["method=choco", f"algorithm.compressor={compressor}"])
    x = torch.randn(5, e.layout.size, dtype=torch.float64)
    e.state.theta.copy_(x)
    e.state.extra["x_hat"].copy_(torch.randn_like(x))
    e.algorithm.communicate(e, 0, torch.arange(5))
    assert not torch.allclose(e.state.theta, x)
    assert torch.allclose(e.state.theta.mean(0), x.mean(0), rtol=0, atol=1e-12)


def test_compressors_against_their_definitions():
    from vecgossip.algorithms.compressors import Compressor
    x = torch.randn(3, 1000, dtype=torch.float64)
    nodes = np.array([4, 7, 9])
    q = Compressor("top_k", 0.02)(x, nodes, 1)
    assert all(torch.equal(q[i], top_k(x[i], 20)) for i in range(3))
    q = Compressor("rand_k", 0.05)(x, nodes, 1)
    assert ((q != 0).sum(1) == 50).all() and torch.equal(q[q != 0], x[q != 0])
    assert torch.equal(q[1], Compressor("rand_k", 0.05)(x[1:2], nodes[1:2], 1)[0])   # per node: any batch
    assert not torch.equal(q, Compressor("rand_k", 0.05)(x, nodes, 2))                # and per round
    q = Compressor("sign")(x, nodes, 1)
    assert torch.allclose(q, x.abs().mean(1, keepdim=True) * torch.sign(x))
    # QSGD: unbiased up to its 1/tau scaling, levels in 0..s, E ||Q(x) - x||^2 <= (1 - delta) ||x||^2
    s, tau = 4, 1 + min(1000 / 16, math.sqrt(1000) / 4)
    mean = torch.stack([Compressor("qsgd", levels=s)(x, nodes, r) for r in range(400)]).mean(0)
    assert torch.allclose(mean * tau, x, atol=0.2 * x.abs().max().item())
    lv = Compressor("qsgd", levels=s)(x, nodes, 1) * s * tau / x.norm(dim=1, keepdim=True)
    assert torch.allclose(lv, lv.round()) and lv.abs().max() <= s
    assert Compressor("top_k", 0.01).row_bytes(1000, 4) == 10 * 8          # values + 32-bit indices
    assert Compressor("qsgd", levels=15).row_bytes(1000, 4) == (1000 * 5 + 32) / 8


# -- gradient tracking --------------------------------------------------------------------------
@pytest.mark.parametrize("form", ["adapt_then_combine", "combine_then_adapt"])
def test_gradient_tracking_matches_its_loop_twin(form):
    cfg, engine = build(["method=gradient_tracking", f"algorithm.form={form}"])
    run_and_compare(engine, reference.gradient_tracking.run(cfg, engine, form))


def test_gradient_tracking_mean_y_is_mean_g_every_round():
    for rounds in (1, 2, 3):
        _, e = build(["method=gradient_tracking", f"rounds={rounds}"])
        e.run(progress=False)
        y, g = e.state.extra["y"], e.state.extra["g"]
        assert torch.allclose(y.mean(0), g.mean(0), rtol=0, atol=1e-13)
        assert not torch.allclose(y, g)                         # y is not each node's own gradient


class QuadraticCtx:
    """A round engine's services for f_i(x) = (x - b_i)^2 / 2 on m scalar nodes (no data, no
    noise): what the public interface promises, implemented by hand."""

    def __init__(self, b: np.ndarray, lr: float, w: np.ndarray):
        from types import SimpleNamespace
        from vecgossip.algorithms.base import NoParams  # noqa: F401
        m = b.size
        self.b, self.w = torch.from_numpy(b), torch.from_numpy(w)
        self.m, self.node_ids, self.online = m, np.arange(m), np.ones(m, dtype=bool)
        self.state = SimpleNamespace(theta=torch.zeros(m, 1, dtype=torch.float64), momentum=torch.zeros(m, 1, dtype=torch.float64),
                                     extra={})
        self.layout = SimpleNamespace(params_size=1, size=1)
        self.opt = SimpleNamespace(momentum=0.0, weight_decay=0.0, lr_at=lambda t: lr)
        self.model_bytes = 8

    def rows(self, clients):
        return clients

    def loss_and_grad(self, theta, x, y, weight=None):
        idx = x                                                   # the "batch" carries the node indices
        return 0.5 * (theta[:, 0] - self.b[idx]) ** 2, theta - self.b[idx, None]

    def local_sgd(self, clients, lr, sam=None, step=None):
        theta = self.state.theta[clients]
        mom = self.state.momentum[clients]
        if step is None:                                          # plain gradient step
            theta -= lr * (theta - self.b[clients, None])
        else:
            step(theta, mom, clients, None, None, lr, clients)
        self.state.theta[clients] = theta
        return 0.0

    def mix(self, x, t, step=0, w=None):
        return self.w @ x

    def messages(self, t, step=0, w=None):
        return 2.0

    def gossip(self, t, clients, steps=None):
        self.state.theta = self.w @ self.state.theta
        return 0.0


def run_quadratic(algo, ctx, rounds: int) -> np.ndarray:
    from vecgossip.core.state import allocate_declared  # noqa: F401  (declared state, by hand below)
    for name, spec in algo.state(ctx.layout).items():
        ctx.state.extra[name] = torch.zeros(ctx.m, *[1 for _ in spec.shape], dtype=torch.float64)
    clients = torch.arange(ctx.m)
    for t in range(rounds):
        algo.local_train(ctx, clients, ctx.opt.lr_at(t))
        algo.communicate(ctx, t, clients)
    return ctx.state.theta[:, 0].numpy()


def test_gradient_tracking_reaches_the_exact_minimiser_where_dpsgd_stays_biased():
    """Ring of 4, f_i = (x - b_i)^2 / 2 with b = (0, 1, 2, 3): the minimiser of sum f_i is
    mean(b) = 1.5. With a constant step, DSGT's every node converges to 1.5; D-PSGD's fixed point
    x* = (I - W + lr I)^{-1} lr b (x = W (x - lr (x - b))) is not consensual: a bias of O(lr)."""
    from vecgossip.algorithms.dpsgd import DPSGD
    from vecgossip.algorithms.gradient_tracking import GradientTracking
    b, lr = np.array([0.0, 1.0, 2.0, 3.0]), 0.1
    w = ring_w(4)
    gt = run_quadratic(GradientTracking(), QuadraticCtx(b, lr, w), 600)
    assert np.allclose(gt, 1.5, atol=1e-10), gt
    dp = run_quadratic(DPSGD(), QuadraticCtx(b, lr, w), 600)
    fixed = np.linalg.solve(np.eye(4) - w @ np.diag(np.full(4, 1 - lr)), lr * w @ b)   # x = W ((1 - lr) x + lr b)
    assert np.allclose(dp, fixed, atol=1e-10)
    assert np.abs(dp - 1.5).max() > 0.05 and np.isclose(dp.mean(), 1.5)


# -- QG-DSGDm -----------------------------------------------------------------------------------
def test_qgdsgdm_matches_its_loop_twin():
    cfg, engine = build(["method=qgdsgdm", "algorithm.mu=0.8"])
    p = engine.layout.params_size
    xs, mh = reference.qgm.run(cfg, engine, beta=0.9, mu=0.8)
    run_and_compare(engine, xs)
    assert torch.allclose(engine.state.extra["m_hat"], torch.stack(mh)[:, :p], rtol=0, atol=1e-8)


# -- SGP ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("topology", ["directed_ring", "one_peer_exponential", "random_out"])
def test_sgp_matches_its_loop_twin_on_directed_graphs(topology):
    """The balanced digraphs keep w = 1; random_out (each node sends to 2 others drawn per round,
    in-degrees vary) moves the weights, so the de-biasing z = x / w is exercised."""
    from vecgossip.network.topology import PerRound
    cfg, engine = build(["method=sgp", f"topology={topology}", "degree=2"] if topology == "random_out"
                        else ["method=sgp", f"topology={topology}"])
    m = 5
    if topology == "directed_ring":
        arcs_at = lambda t: [(i, (i + 1) % m) for i in range(m)]                     # noqa: E731
    elif topology == "one_peer_exponential":              # i -> i + 2^(t mod ceil(log2 5) = 3)
        arcs_at = lambda t: [(i, (i + 2 ** (t % 3)) % m) for i in range(m)]          # noqa: E731
    else:                                                 # the topology's own draws (not under test here)
        arcs_at = lambda t: [tuple(a) for a in PerRound("random_out", m, 2, int(cfg.seed)).at(t).arcs.tolist()]  # noqa: E731
    run_and_compare(engine, reference.sgp.run(cfg, engine, arcs_at))
    if topology == "random_out":
        assert not torch.allclose(engine.state.extra["w"], torch.ones(m, 1, dtype=torch.float64))


def test_sgp_on_a_symmetric_doubly_stochastic_w_is_dpsgd():
    _, sgp = build(["method=sgp"])
    _, dpsgd = build(["method=dpsgd"])
    sgp.run(progress=False)
    dpsgd.run(progress=False)
    assert torch.allclose(sgp.state.extra["w"], torch.ones(5, 1, dtype=torch.float64), atol=1e-14)
    assert torch.allclose(sgp.state.theta, dpsgd.state.theta, rtol=0, atol=1e-12)


@pytest.mark.parametrize("extra", [[], ["faults.drop=0.4"]], ids=["plain", "drop0.4"])
def test_sgp_conserves_sum_x_and_sum_w_on_a_random_digraph(extra):
    """One mixing step on random_out (in-degrees vary, so P is not doubly stochastic): sum_i x_i
    and sum_i w_i are unchanged, also when messages are lost (the sender keeps their mass)."""
    _, e = build(["method=sgp", "topology=random_out", "degree=2", *extra])
    e.online = np.ones(5, dtype=bool)
    num, w = e.state.extra["x"], e.state.extra["w"]
    num.copy_(torch.randn_like(num))
    before_x, before_w = num.sum(0).clone(), w.sum(0).clone()
    for t in range(3):
        e.algorithm.communicate(e, t, torch.arange(5))
    assert torch.allclose(num.sum(0), before_x, rtol=0, atol=1e-12) and torch.allclose(w.sum(0), before_w, atol=1e-14)
    assert not torch.allclose(w, torch.ones_like(w))            # unbalanced: the weights moved
    assert torch.allclose(e.state.theta, num / w)
    if extra:
        assert e.faults.lost > 0


def test_directed_topologies_refuse_doubly_stochastic_algorithms_unless_balanced():
    from vecgossip.core.errors import ConfigError
    from vecgossip.composition.root import validate
    with pytest.raises(ConfigError, match="topology=random_out is directed and unbalanced"):
        validate(vecgossip.compose(overrides=["method=dpsgd", "topology=random_out", "clients=8", "degree=2"]), [])
    validate(vecgossip.compose(overrides=["method=dpsgd", "topology=directed_ring", "clients=8"]), [])
    with pytest.raises(ConfigError, match="topology=one_peer_exponential is directed: it needs a round-engine"):
        validate(vecgossip.compose(overrides=["method=vc", "topology=one_peer_exponential"]), [])


# -- Epidemic Learning --------------------------------------------------------------------------
@pytest.mark.parametrize("variant, extra", [("local", []), ("oracle", []), ("local", ["faults.drop=0.3"])],
                         ids=["local", "oracle", "local-drop0.3"])
def test_epidemic_learning_matches_its_loop_twin(variant, extra, monkeypatch):
    """The round matrices the algorithm drew are checked against EL's definition, and the models
    against the per-node loop that averages, for each node, its own and the models that arrived."""
    cfg, engine = build([f"method=el_{variant}", "topology=complete", "clients=6", "algorithm.s=2", "local_steps=2",
                         "local_epochs=null",
                         *extra])
    drawn = []
    draw = engine.algorithm.round_matrix
    monkeypatch.setattr(engine.algorithm, "round_matrix", lambda m, rng: drawn.append(draw(m, rng)) or drawn[-1])
    m = engine.m
    tw = Twin(cfg, engine)                         # the twin starts where the engine starts
    engine.run(progress=False)
    for w in drawn:
        a = (w.toarray() > 0).astype(int) - np.eye(m, dtype=int)        # receiver-by-sender
        if variant == "local":
            assert (a.sum(0) == 2).all() and (np.diag(a) == 0).all()      # every node sends to 2 others
        else:
            assert (a == a.T).all() and (a.sum(0) == 2).all()             # a 2-regular undirected graph
    xs = reference.epidemic.run(tw, drawn, steps=2)
    assert len(drawn) == cfg.engine.rounds
    want = torch.stack(xs)
    assert ((engine.state.theta - want).norm(dim=1) / want.norm(dim=1)).max() < TOL


# -- AD-PSGD (tick engine) ----------------------------------------------------------------------
TICK = [*COMMON, "method=adpsgd", "nodes=6", "degree=2", "max_ticks=16", "t_acq=5", "data.batch_size=8",
        "eval_every=5"]


def test_pair_batches_apply_in_node_order():
    from vecgossip.algorithms.adpsgd import pair_batches
    pairs = [(0, 4), (1, 4), (1, 2), (3, 5), (2, 5)]
    assert pair_batches(pairs) == [[(0, 4), (3, 5)], [(1, 4)], [(1, 2)], [(2, 5)]]


@pytest.mark.parametrize("extra", [[], ["faults.drop=0.3"]], ids=["plain", "drop0.3"])
def test_adpsgd_matches_its_loop_twin(extra):
    """Every node due at ticks 0, 5, 10, 15: gradients at the models read, then in node order each
    averages with a uniformly drawn neighbour (one draw of the algorithm's stream each), then its
    Caffe SGD step (momentum, weight decay, inv lr of its own step count, bias lr x2). Under
    faults each direction of an exchange is a message (drawn per conflict-free batch of pairs,
    receivers ascending, as the engine's W x draws them) and a lost one leaves that side as it was."""
    from vecgossip.composition import tick
    cases.register()
    cfg = vecgossip.compose(overrides=[*TICK, *extra])
    engine, ref = tick.build_engine(run_of(cfg)), tick.build_engine(run_of(cfg))       # ref: the draws, replayed
    xs = reference.adpsgd.run(cfg, engine, ref, range(0, 16, 5))
    faults = faults_of(cfg, engine.n)
    engine.run(progress=False)
    want = torch.stack(xs)
    assert ((engine.state.theta - want).norm(dim=1) / want.norm(dim=1)).max() < TOL
    if faults is not None:
        assert engine.faults.lost > 0
