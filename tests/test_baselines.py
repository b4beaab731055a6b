"""Issue 24: the field's baselines, each one file on the public algorithm interface, against a
plain per-node loop twin (nn.Modules, autograd, Python loops over W_ij written here) on 5-6 nodes
over 2-3 rounds in float64, plus the property tests their papers state: CHOCO-SGD (identity
compression with gamma = 1 is D-PSGD; the consensus step keeps the average), gradient tracking
(mean y = mean g every round; the exact minimiser of a heterogeneous quadratic where D-PSGD stays
biased), QG-DSGDm, SGP (D-PSGD on a symmetric W; sum x and sum w conserved on a digraph, also
under message loss), Epidemic Learning (EL-Local / EL-Oracle matrices, averaging what arrived),
AD-PSGD on the tick clock (pairs applied in node order)."""
from __future__ import annotations

import copy
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import vecgossip
from vecgossip.algorithms import Streams

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
    return cfg, rounds.build_engine(cfg)


class Twin:
    """Per-node plain modules from the engine's initial models, its sampler's draws replayed from
    a copy, and (under faults) its fault draws replayed from a copy of the same stream."""

    def __init__(self, cfg, engine):
        from vecgossip.core.faults import Faults
        from vecgossip.models import build as build_model
        from vecgossip.composition.tick import fault_config
        from vecgossip.core.state import load_flat
        self.cfg, self.layout, self.data, self.m = cfg, engine.layout, engine.train_data, engine.m
        self.nets = []
        for i in range(self.m):
            net = build_model(cfg.model.name, self.data.shape, self.data.num_classes).double()
            load_flat(net, self.layout, engine.state.theta[i])
            self.nets.append(net)
        s = engine.sampler
        self.sampler = copy.copy(s)
        self.sampler.gen = torch.Generator().set_state(s.gen.get_state())
        self.sampler.order, self.sampler.step = s.order.clone(), s.step.clone()
        fc = fault_config(cfg)
        self.faults = Faults(fc, self.m, np.random.default_rng([int(cfg.seed), 3])) if fc.active else None
        self.o = cfg.optim

    def x(self, i: int) -> torch.Tensor:
        from vecgossip.core.state import flatten
        return flatten(self.nets[i]).detach().clone()

    def set(self, i: int, flat: torch.Tensor) -> None:
        from vecgossip.core.state import load_flat
        load_flat(self.nets[i], self.layout, flat)

    def grads(self, at: list[torch.Tensor]) -> list[torch.Tensor]:
        """Every node's minibatch gradient at the flat models ``at`` (the next batch of each)."""
        batch = self.sampler.next(torch.arange(self.m))
        out = []
        for i, net in enumerate(self.nets):
            self.set(i, at[i])
            x, y, wt = batch.materialise(self.data, i, i + 1)
            keep = wt[0] > 0
            net.zero_grad()
            F.cross_entropy(net(x[0][keep]), y[0][keep]).backward()
            out.append(torch.cat([p.grad.flatten() for p in net.parameters()]))
        return out

    def lr(self, t: int) -> float:
        return self.o.lr * self.o.lr_decay ** t


def ring_w(m: int) -> np.ndarray:
    w = np.zeros((m, m))
    for i in range(m):
        for j in (i - 1, i, i + 1):
            w[i, j % m] = 1 / 3
    return w


def mix(w: np.ndarray, xs: list[torch.Tensor]) -> list[torch.Tensor]:
    """x_i <- sum_j w_ij x_j, as Python loops."""
    out = []
    for i in range(len(xs)):
        acc = torch.zeros_like(xs[i])
        for j in range(len(xs)):
            if w[i, j]:
                acc = acc + w[i, j] * xs[j]
        out.append(acc)
    return out


def run_and_compare(engine, want: list[torch.Tensor], tol: float = TOL) -> None:
    engine.run(progress=False)
    want = torch.stack(want)
    rel = (engine.state.theta - want).norm(dim=1) / want.norm(dim=1)
    assert rel.max() < tol, rel


# -- CHOCO-SGD ----------------------------------------------------------------------------------
def top_k(v: torch.Tensor, k: int) -> torch.Tensor:
    """The k entries of largest magnitude, by numpy's sort (an independent top-k)."""
    a = v.numpy()
    keep = np.argsort(-np.abs(a), kind="stable")[:k]
    out = np.zeros_like(a)
    out[keep] = a[keep]
    return torch.from_numpy(out)


@pytest.mark.parametrize("extra", [[], ["faults.drop=0.3", "faults.offline=0.2"]], ids=["plain", "faults"])
def test_choco_matches_its_loop_twin(extra):
    cfg, engine = build(["method=choco", "algorithm.gamma=0.5", "algorithm.fraction=0.1", *extra])
    tw = Twin(cfg, engine)
    m, wd, gamma = tw.m, tw.o.weight_decay, 0.5
    k = max(1, round(0.1 * engine.layout.size))
    w = ring_w(m)
    xs = [tw.x(i) for i in range(m)]
    xhat = [torch.zeros_like(xs[0]) for _ in range(m)]
    for t in range(cfg.engine.rounds):
        online = tw.faults.online(t) if tw.faults else np.ones(m, dtype=bool)
        g = tw.grads(xs)
        xs = [x - tw.lr(t) * (gi + wd * x) if online[i] else x for i, (x, gi) in enumerate(zip(xs, g))]
        xhat = [h + top_k(x - h, k) if online[i] else h for i, (x, h) in enumerate(zip(xs, xhat))]
        new = []
        for i in range(m):
            acc = xs[i].clone()
            for j in range(m):                                   # row-major: one fault draw per message
                if j != i and w[i, j]:
                    kept = tw.faults is None or bool(tw.faults.kept(1)[0])
                    if kept and online[j] and online[i]:
                        acc = acc + gamma * w[i, j] * (xhat[j] - xhat[i])
            new.append(acc)
        xs = new
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
    tw = Twin(cfg, engine)
    m, wd, w = tw.m, tw.o.weight_decay, ring_w(tw.m)
    xs = [tw.x(i) for i in range(m)]
    ys = [torch.zeros_like(xs[0]) for _ in range(m)]
    gs = [torch.zeros_like(xs[0]) for _ in range(m)]
    for t in range(cfg.engine.rounds):
        new_g = [g + wd * x for g, x in zip(tw.grads(xs), xs)]
        ys = [y + ng - g for y, ng, g in zip(ys, new_g, gs)]
        gs = new_g
        lr = tw.lr(t)
        if form == "adapt_then_combine":
            xs = mix(w, [x - lr * y for x, y in zip(xs, ys)])
        else:
            xs = [x - lr * y for x, y in zip(mix(w, xs), ys)]
        ys = mix(w, ys)
    run_and_compare(engine, xs)


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
    tw = Twin(cfg, engine)
    m, wd, w, beta, mu = tw.m, tw.o.weight_decay, ring_w(tw.m), 0.9, 0.8
    p = engine.layout.params_size
    xs = [tw.x(i) for i in range(m)]
    mh = [torch.zeros_like(xs[0]) for _ in range(m)]
    for t in range(cfg.engine.rounds):
        lr = tw.lr(t)
        g = tw.grads(xs)
        half = [x - lr * (beta * h + gi + wd * x) for x, h, gi in zip(xs, mh, g)]
        new = mix(w, half)
        mh = [mu * h + (1 - mu) * (x - n) / lr for h, x, n in zip(mh, xs, new)]
        xs = new
    run_and_compare(engine, xs)
    assert torch.allclose(engine.state.extra["m_hat"], torch.stack(mh)[:, :p], rtol=0, atol=1e-8)


# -- SGP ----------------------------------------------------------------------------------------
def sgp_twin(cfg, engine, arcs_at) -> list[torch.Tensor]:
    """Push-sum by hand: P_ij = 1/(out_j + 1) for j -> i and on j's own diagonal."""
    tw = Twin(cfg, engine)
    m, wd = tw.m, tw.o.weight_decay
    xs = [tw.x(i) for i in range(m)]
    ws = [1.0] * m
    for t in range(cfg.engine.rounds):
        zs = [x / wi for x, wi in zip(xs, ws)]
        g = tw.grads(zs)
        half = [x - tw.lr(t) * (gi + wd * z) for x, gi, z in zip(xs, g, zs)]
        arcs = arcs_at(t)
        out = [sum(1 for a, _ in arcs if a == j) for j in range(m)]
        pm = np.zeros((m, m))
        for j in range(m):
            pm[j, j] = 1 / (out[j] + 1)
        for a, b in arcs:
            pm[b, a] = 1 / (out[a] + 1)
        xs = mix(pm, half)
        ws = [sum(pm[i, j] * ws[j] for j in range(m)) for i in range(m)]
    return [x / wi for x, wi in zip(xs, ws)]


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
    run_and_compare(engine, sgp_twin(cfg, engine, arcs_at))
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
    tw = Twin(cfg, engine)
    m, wd, mom = tw.m, tw.o.weight_decay, tw.o.momentum
    xs = [tw.x(i) for i in range(m)]
    vs = [torch.zeros_like(xs[0]) for _ in range(m)]
    engine.run(progress=False)
    for t, w in enumerate(drawn):
        a = (w.toarray() > 0).astype(int) - np.eye(m, dtype=int)        # receiver-by-sender
        if variant == "local":
            assert (a.sum(0) == 2).all() and (np.diag(a) == 0).all()      # every node sends to 2 others
        else:
            assert (a == a.T).all() and (a.sum(0) == 2).all()             # a 2-regular undirected graph
        online = tw.faults.online(t) if tw.faults else np.ones(m, dtype=bool)
        for _ in range(2):
            g = tw.grads(xs)
            for i in range(m):
                vs[i] = mom * vs[i] + g[i] + wd * xs[i]
                xs[i] = xs[i] - tw.lr(t) * vs[i]
        new = []
        for i in range(m):
            got = [xs[i]]
            for j in range(m):
                if a[i, j]:
                    kept = tw.faults is None or bool(tw.faults.kept(1)[0])
                    if kept and online[i] and online[j]:
                        got.append(xs[j])
            new.append(sum(got) / len(got))
        xs = new
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
    from vecgossip.algorithms.adpsgd import pair_batches
    from vecgossip.core.faults import Faults
    from vecgossip.models import build as build_model
    from vecgossip.composition import tick
    from vecgossip.composition.tick import fault_config
    from vecgossip.core.state import load_flat
    cases.register()
    cfg = vecgossip.compose(overrides=[*TICK, *extra])
    engine, ref = tick.build_engine(cfg), tick.build_engine(cfg)       # ref: the draws, replayed
    layout, data, n, o = engine.layout, engine.train_data, engine.n, cfg.optim
    xs = [engine.state.theta[i].clone() for i in range(n)]
    vs = [torch.zeros_like(xs[0]) for _ in range(n)]
    iters = [0] * n
    rng = Streams.of(int(cfg.seed)).numpy
    fc = fault_config(cfg)
    faults = Faults(fc, n, np.random.default_rng([int(cfg.seed), 3])) if fc.active else None
    peers = [np.flatnonzero(ref.a_full.toarray()[:, i]) for i in range(n)]
    bias = torch.cat([torch.full((s.stop - s.start,), o.bias_lr_mult if s.is_bias else 1.0, dtype=torch.float64)
                      for s in layout.specs])
    net = build_model("mlp", data.shape, data.num_classes).double()
    for t in range(0, 16, 5):
        online = faults.online(t) if faults else np.ones(n, dtype=bool)
        due = np.flatnonzero(online)
        _, images, _ = ref.draw(due)
        grads = []
        for r, i in enumerate(due):
            load_flat(net, layout, xs[i])
            x, y = data.train_batch(images[r:r + 1], None)
            net.zero_grad()
            F.cross_entropy(net(x[0]), y[0]).backward()
            grads.append(torch.cat([p.grad.flatten() for p in net.parameters()]))
        pairs = [(int(i), int(peers[i][rng.integers(peers[i].size)])) for i in due]
        for batch in pair_batches(pairs):
            for i, j in batch:
                assert i != j and j in peers[i]
            arrived = {}
            for a in sorted(v for pair in batch for v in pair):      # receivers ascending: one draw each
                b = next(q for pair in batch for q in pair if a in pair and q != a)
                kept = True if faults is None else bool(faults.kept(1)[0])
                arrived[a] = kept and online[a] and online[b]
            for i, j in batch:
                xi, xj = xs[i], xs[j]
                xs[i] = (xi + xj) / 2 if arrived[i] else xi
                xs[j] = (xi + xj) / 2 if arrived[j] else xj
        for r, i in enumerate(due):
            lr = o.lr * (1 + o.gamma * iters[i]) ** (-o.power)
            vs[i] = o.momentum * vs[i] + lr * bias * (grads[r] + o.weight_decay * xs[i])
            xs[i] = xs[i] - vs[i]
            iters[i] += 1
    engine.run(progress=False)
    want = torch.stack(xs)
    assert ((engine.state.theta - want).norm(dim=1) / want.norm(dim=1)).max() < TOL
    if faults is not None:
        assert engine.faults.lost > 0
