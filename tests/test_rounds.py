"""The round engine (paper 2) against a plain per-client loop twin: nn.Modules with torch.optim.SGD
(and SAM written out per client), Python loops for gossip (W_ij from the graph, computed here) and
for the server average. The engine is built from the real method configs (vecgossip/conf/method/*.yaml) on
small synthetic CIFAR-shaped data; the twin consumes the same minibatches (an identically seeded
copy of the engine's sampler) and the same per-round graphs, so both must agree to 1e-5."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import reference.dfl
from conftest import run_of, torch_threads, ulp_moved
from test_config import make
from vecgossip.data.dataset import Dataset, LabelIndex
from vecgossip.network.mixing import gossip
from vecgossip.models import build as build_model
from vecgossip.composition import rounds as setup
from vecgossip.composition import parts
from vecgossip.core.state import flatten, load_flat
from vecgossip.network.topology import RandomGraphs, build

SHAPE, CLASSES = (3, 16, 16), 5


def synthetic(n: int, seed: int, augment: int, dtype=torch.float32) -> Dataset:
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, *SHAPE), generator=g, dtype=torch.uint8)
    labels = torch.randint(0, CLASSES, (n,), generator=g)
    std = torch.tensor([0.25, 0.24, 0.26], dtype=dtype)
    return Dataset(images, labels, LabelIndex.of(labels, CLASSES), 1 / (255 * std),
                   -torch.tensor([0.5, 0.5, 0.4], dtype=dtype) / std, augment, "cifar10", "synthetic", dtype)


DTYPE = {"dtype": torch.float32}


@pytest.fixture
def fake_data(monkeypatch):
    """datasets.load -> small synthetic train (crop/flip augmentation on) and test sets."""
    def load(name, root, train, download=False, device="cpu", augment=True, dtype=None):
        return synthetic(240, 1, 2, DTYPE["dtype"]) if train else synthetic(100, 2, 0, DTYPE["dtype"])
    monkeypatch.setattr(parts, "load", load)               # both engines load through composition.parts
    yield DTYPE
    DTYPE["dtype"] = torch.float32


def engine_for(method: str, extra=(), dtype=torch.float32):
    """The engine of ``method`` from its real config; ``dtype`` float64 runs the same code in double
    precision (data, state and W), where the twin must agree to ~1e-12."""
    DTYPE["dtype"] = dtype
    base = ["model=cnn", "data=cifar10", "clients=6", "rounds=2", "eval_every=1", "data.batch_size=8",
            "data.local_test_size=10", "data.global_test_size=20", "data.min_samples=5", "engine.train_chunk=4",
            "progress=false", "model.exec=batched"]   # pinned: auto would probe float32 rows on this float64 data
    given = {e.split("=", 1)[0] for e in extra}
    cfg = make([f"method={method}", *(b for b in base if b.split("=", 1)[0] not in given), *extra])
    engine = setup.build_engine(run_of(cfg))
    st = engine.state
    st.theta, st.momentum = st.theta.to(dtype), st.momentum.to(dtype)
    if engine.mixing is not None:
        engine.mixing.dtype = dtype
    return cfg, engine


# Every multi-step case runs in float64, where the engine and the twin agree to ~1e-12. In float32
# a multi-step comparison is not a test of the code: once a max-pool/ReLU decision of some image lies
# within float32 noise of a tie (random-pixel images with zero-padded crops have them), the two
# sides' 1e-7 rounding difference flips it and the trajectories part chaotically, to ~1e-3. Which
# case meets such a tie depends on how the CPU's kernels round: the old float32 case
# dfedavg-ring-K3-2-rounds passed on AVX2/AVX-512 machines and failed at 2.5e-3 on an AVX-512 + AMX
# Xeon; here (AMD EPYC, AVX-512) it fails at 2.5e-3 too once the engine's initial models are moved
# by one ulp (2 of 7 perturbations, see the float32 tests below). float32 is therefore checked one
# local step at a time (ONE_STEP), where nothing amplifies and the test asserts its own premise.
CASES = [
    ("dpsgd", ["topology=ring"], torch.float64),
    ("dfedavg", ["topology=ring", "local_steps=3", "local_epochs=null"], torch.float64),
    ("dfedavgm", ["topology=random", "degree=2", "local_epochs=1", "alpha=0.5"], torch.float64),  # unequal shards
    ("dfedsam", ["topology=ring", "local_steps=3", "local_epochs=null"], torch.float64),
    ("dfedsam", ["topology=complete", "local_steps=2", "local_epochs=null", "optim.momentum=0"],   # the seed's formula
     torch.float64),
    ("dfedsam_mgs", ["topology=ring", "local_steps=2", "local_epochs=null"], torch.float64),
    ("dfedavgm", ["topology=ring", "local_steps=2", "local_epochs=null", "participation=0.5"], torch.float64),
    ("dfedavgm", ["topology=exponential", "local_steps=2", "local_epochs=null", "optim.reset_momentum=true"],
     torch.float64),
    ("fedavg", ["local_epochs=1", "participation=0.5", "alpha=0.5"], torch.float64),
    ("fedsam", ["local_steps=2", "local_epochs=null", "participation=0.5"], torch.float64),
    # model.exec=per_client, one client per chunk: the plain module on views of the stacked state,
    # torch's fused SGD kernel, and SAM's ascent point written into a kept buffer (optim.sam_point_one)
    ("dfedavgm", ["topology=ring", "local_steps=2", "local_epochs=null", "model.exec=per_client",
                  "engine.train_chunk=1"], torch.float64),
    ("dfedsam", ["topology=ring", "local_steps=3", "local_epochs=null", "model.exec=per_client",
                 "engine.train_chunk=1"], torch.float64),
]


def twin_inputs(engine):
    """The twin's copies of the engine's sampler and round generator, taken before it runs."""
    sampler = copy.copy(engine.sampler)
    sampler.gen = torch.Generator().set_state(engine.sampler.gen.get_state())
    sampler.order, sampler.step = engine.sampler.order.clone(), engine.sampler.step.clone()
    return sampler, copy.deepcopy(engine.rng)


@pytest.mark.parametrize("method,extra,dtype", CASES,
                         ids=[f"{m}-{i}-{str(d)[6:]}" for i, (m, _, d) in enumerate(CASES)])
def test_engine_matches_per_client_loop(fake_data, method, extra, dtype):
    cfg, engine = engine_for(method, extra, dtype)
    init = engine.state.theta.clone()
    twin_sampler, twin_rng = twin_inputs(engine)
    hist = engine.run(progress=False)
    want = reference.dfl.run(cfg, engine, twin_sampler, twin_rng, init)
    got = engine.state.theta
    rel = (got - want).norm(dim=1) / want.norm(dim=1)
    assert rel.max() <= (1e-5 if dtype == torch.float32 else 1e-11), rel
    assert (got - init).norm() > 1e-3 * init.norm()        # it really trained
    assert len(hist.rows) == 3 and hist.rows[-1]["round"] == 2
    if cfg.method_name in reference.dfl.SERVER_METHODS:
        assert hist.rows[-1]["consensus_distance"] < 1e-10   # every client holds the global model
    else:
        assert hist.rows[-1]["consensus_distance"] > 0


# float32, one local step and one communication from the initial models. Both sides start from the
# same state, so nothing earlier can be amplified: the engine and the twin differ by the step's own
# rounding (measured 4e-8-7e-8), and a decision of the step that rounding flips changes only its own
# term of one sample's gradient. (Near-ties are common here: FedSAM's forwards have a decision
# 2.4e-8 of the layer's activation scale from its tie, within float32 noise, and still agree to
# 1.3e-8.) Amplification needs a second step taken from already-different states, which is what
# parts the multi-step float32 cases: under the one-ulp perturbations below, the old float32 case
# dfedavg-ring-K3-2-rounds parts by 2.5e-3 for 2 of 7 seeds, while every ONE_STEP case stays at
# 7e-8 for all of them and under 1 and 2 threads.
ONE_STEP = [
    ("dpsgd", ["topology=ring", "rounds=1"]),
    ("dfedavgm", ["topology=ring", "local_steps=1", "local_epochs=null", "rounds=1"]),
    ("dfedsam", ["topology=ring", "local_steps=1", "local_epochs=null", "rounds=1"]),
    ("fedsam", ["local_steps=1", "local_epochs=null", "participation=0.5", "rounds=1"]),
]


def float32_step(fake_data, method, extra, ulp_seed: int = 0, threads: int | None = None) -> None:
    """One float32 step of ``method`` against the float32 twin; ``ulp_seed`` > 0 moves every
    initial parameter of the engine (not the twin's) by one ulp up or down (a stand-in for a CPU
    whose kernels round differently), ``threads`` runs the engine under that many threads."""
    cfg, engine = engine_for(method, extra, torch.float32)
    init = engine.state.theta.clone()
    engine.state.theta.copy_(ulp_moved(init, ulp_seed))
    twin_sampler, twin_rng = twin_inputs(engine)
    with torch_threads(threads):
        engine.run(progress=False)
    want = reference.dfl.run(cfg, engine, twin_sampler, twin_rng, init)
    got = engine.state.theta
    rel = (got - want).norm(dim=1) / want.norm(dim=1)
    assert rel.max() <= 1e-5, rel
    assert (got - init).norm() > 1e-3 * init.norm()        # the one step really moved the models


@pytest.mark.parametrize("method,extra", ONE_STEP, ids=[m for m, _ in ONE_STEP])
def test_float32_step_matches_per_client_loop(fake_data, method, extra):
    float32_step(fake_data, method, extra)


@pytest.mark.parametrize("ulp_seed,threads", [(1, 1), (2, 2), (7, 1), (7, 2)])
@pytest.mark.parametrize("method,extra", ONE_STEP[1::2], ids=[m for m, _ in ONE_STEP[1::2]])
def test_float32_step_does_not_depend_on_rounding(fake_data, method, extra, ulp_seed, threads):
    """The float32 comparison holds whatever the rounding: the engine's initial models moved by one
    ulp (seed 1 and seed 7 part the old multi-step float32 case by 2.5e-3 on an AMD EPYC with
    AVX-512), the engine under 1 or 2 threads."""
    float32_step(fake_data, method, extra, ulp_seed, threads)


@pytest.mark.parametrize("model,extra,exec_", [
    ("resnet18", ["model.norm=batch"], "batched"),
    ("vgg11", ["model.norm=batch", "model.average_buffers=false"], "batched"),
    pytest.param("resnet18", ["model.norm=group"], "batched", marks=pytest.mark.slow),   # ~14 s: the suite's time
    ("vgg11", ["model.norm=batch"], "per_client"),        # model.exec: each client through the plain module
], ids=["resnet18-batchnorm", "vgg11-batchnorm-own-stats", "resnet18-groupnorm", "vgg11-batchnorm-per-client"])
def test_paper_models_match_per_client_loop(fake_data, model, extra, exec_):
    """Issue 12's tiny loop twin: 3 clients, batch 4, 2 local SAM steps with momentum 0.9 and weight
    decay, a ring; the batched vmap path of ResNet-18 / VGG-11 against per-client torchvision-style
    modules with torch.optim.SGD. BatchNorm: training mode (batch statistics; each client's running
    statistics updated by the first SAM pass, gossiped with the model or kept by the client), then
    evaluation mode (the running statistics normalise): the batched evaluation forward's logits
    equal each module's in ``eval()``.

    float64: 1e-11 (BatchNorm: 1e-9; VGG-11 measured 1e-10). float32 (one local step, see CASES):
    GroupNorm 1e-4; BatchNorm
    over 4 random-pixel images is chaotic in
    float32 (a 16x16 input leaves 16 values per channel in the last stage; measured: the float32
    loop itself ends 2e-1 (VGG-11) / 5e-4 (ResNet-18) away from the float64 loop after these two
    steps), so there float32 is checked one step at a time (test_batchnorm_float32_step)."""
    bn = "model.norm=batch" in extra
    for dtype, tol in ((torch.float64, 1e-9 if bn else 1e-11), (torch.float32, 1e-4)):
        if dtype == torch.float32 and bn:
            continue
        steps = 2 if dtype == torch.float64 else 1          # float32: one step, nothing to amplify (CASES)
        cfg, engine = engine_for("dfedsam", [f"model={model}", "clients=3", "topology=ring", "data.batch_size=4",
                                             f"local_steps={steps}", "local_epochs=null", "rounds=1",
                                             f"model.exec={exec_}", *extra], dtype)
        assert engine.execution.train == exec_
        init = engine.state.theta.clone()
        twin_sampler = copy.copy(engine.sampler)
        twin_sampler.gen = torch.Generator().set_state(engine.sampler.gen.get_state())
        twin_sampler.order, twin_sampler.step = engine.sampler.order.clone(), engine.sampler.step.clone()
        engine.run(progress=False)
        want = reference.dfl.run(cfg, engine, twin_sampler, copy.deepcopy(engine.rng), init)
        got, layout = engine.state.theta, engine.layout
        rel = (got - want).norm(dim=1) / want.norm(dim=1)
        assert rel.max() <= tol, (dtype, rel)
        assert (got - init).norm() > 1e-4 * init.norm()
        p = layout.params_size
        if not bn:
            assert not layout.buffers
            continue
        stats = (got[:, p:] - want[:, p:]).norm(dim=1) / want[:, p:].norm(dim=1)
        assert stats.max() <= tol, stats                              # the running statistics alone
        assert (got[:, p:] - init[:, p:]).abs().min(1).values.max() > 0   # they moved ...
        if "model.average_buffers=false" in extra:                   # ... and stayed each client's own
            assert (got[0, p:] - got[1, p:]).abs().max() > 1e-3 * got[0, p:].abs().max()
        x = engine.evals.test.batch(torch.arange(6))[0]
        for dt, tol_eval in ((torch.float64, 1e-11), (torch.float32, 1e-4)):   # evaluation mode
            with torch.no_grad():
                batched = engine.forward(layout.views(got.to(dt), buffers=True), x.to(dt).expand(3, *x.shape),
                                         train=False)
                for i in range(3):
                    net = build_model(model, SHAPE, CLASSES, "batch").to(dt)
                    load_flat(net, layout, got[i].to(dt))
                    ref = net.eval()(x.to(dt))
                    assert (batched[i] - ref).norm() <= tol_eval * ref.norm(), (dt, i)
                    assert (net.train()(x.to(dt)) - ref).norm() > 1e-3 * ref.norm()   # eval differs from train


@pytest.mark.parametrize("model", ["resnet18", "vgg11"])
def test_batchnorm_float32_step(model):
    """float32 BatchNorm, one training forward/backward of 3 clients on batch 4 (and a lone client,
    the pair path), against per-client modules in float64 (an independent reference; in float64
    the batched path equals them to 1e-11, test above). The float32 bounds are those of an Intel
    Xeon (logits 1e-5, gradients 1e-2) or, where the float32 module itself lands farther from
    float64, 3x (logits) / 4x (gradients) the module's own distance: BatchNorm's backward is
    ill-conditioned in float32 at initialisation (ResNet-18: the float32 module lands up to 7e-3
    from float64 at B = 32, 8.5e-3 here on a 2-core AMD EPYC, where the batched side's other
    summation order lands 2.6e-2; VGG-11's logits 1.0e-5 and 1.6e-5 there), so the bound catches a
    wrong formula, not rounding. Running statistics within 1e-6."""
    from vecgossip.models import make_forward
    from vecgossip.core.optim import loss_and_grad
    from vecgossip.core.state import Layout, init_theta
    layout = Layout.of(build_model(model, SHAPE, CLASSES, "batch"))
    theta = init_theta(layout, 3, "torch", torch.Generator().manual_seed(0))
    fwd = make_forward(model, "vmap", SHAPE, CLASSES, "batch")
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(3, 4, *SHAPE, generator=g), torch.randint(0, CLASSES, (3, 4), generator=g)
    p = layout.params_size
    with torch.no_grad():
        logits = fwd(layout.views(theta) | layout.buffer_copies(theta), x)       # training mode
    for rows in (slice(0, 3), slice(1, 2)):                         # a chunk of 3, a lone client
        th = theta[rows].clone()
        _, grads = loss_and_grad(fwd, layout, th, x[rows], y[rows], factored=False)
        for j, i in enumerate(range(3)[rows]):
            net = build_model(model, SHAPE, CLASSES, "batch").double()
            load_flat(net, layout, theta[i].double())
            out = net(x[i].double())
            f32 = build_model(model, SHAPE, CLASSES, "batch")                  # the float32 module's own error
            load_flat(f32, layout, theta[i])
            out32 = f32(x[i])
            own = float((out32.double() - out).detach().norm() / out.detach().norm())
            assert (logits[i].double() - out).norm() <= max(1e-5, 3 * own) * out.norm(), (i, own)
            F.cross_entropy(out, y[i]).backward()
            F.cross_entropy(out32, y[i]).backward()
            pairs = [(gb[j], q.grad, q32.grad) for gb, q, q32 in zip(grads, net.parameters(), f32.parameters())
                     if q.grad.norm() > 1e-3]
            assert len(pairs) > len(layout.specs) // 2      # (conv biases before a BatchNorm get ~0)
            rel = lambda a, b: float((a.double() - b).norm() / b.norm())       # noqa: E731
            worst = max(rel(a, b) for a, b, _ in pairs)
            own = max(rel(c, b) for _, b, c in pairs)
            assert worst <= max(1e-2, 4 * own), (i, worst, own)
            stats = (th[j, p:].double() - flatten(net)[p:]).abs().max()
            assert stats <= 1e-6 * flatten(net)[p:].abs().max(), (i, stats)
            assert (th[j, p:] - theta[i, p:]).abs().max() > 0                       # updated in place


FAULTY = [
    ("dfedavgm", ["topology=ring", "faults.drop=0.3"]),
    ("dfedsam_mgs", ["topology=exponential", "faults.drop=0.2", "faults.offline=0.3"]),
    ("dfedavg", ["topology=ring", "faults.crash_at=1", "faults.crash_nodes=[2,3]"]),
    ("fedavg", ["participation=0.5", "faults.drop=0.3", "faults.offline=0.2"]),
]


@pytest.mark.parametrize("method,extra", FAULTY, ids=[f"{m}-{i}" for i, (m, _) in enumerate(FAULTY)])
def test_faulty_rounds_match_per_client_loop(fake_data, method, extra):
    from vecgossip.core.faults import Faults
    cfg, engine = engine_for(method, [*extra, "local_steps=2", "local_epochs=null", "rounds=3"], torch.float64)
    init = engine.state.theta.clone()
    twin_sampler = copy.copy(engine.sampler)
    twin_sampler.gen = torch.Generator().set_state(engine.sampler.gen.get_state())
    twin_sampler.order, twin_sampler.step = engine.sampler.order.clone(), engine.sampler.step.clone()
    twin_rng = copy.deepcopy(engine.rng)
    twin_faults = Faults(engine.faults.cfg, engine.m, copy.deepcopy(engine.faults.rng))
    hist = engine.run(progress=False)
    want = reference.dfl.run(cfg, engine, twin_sampler, twin_rng, init, faults=twin_faults)
    rel = (engine.state.theta - want).norm(dim=1) / want.norm(dim=1)
    assert rel.max() <= 1e-11, rel
    assert hist.rows[-1]["messages_sent"] > 0 and "clients_online" in hist.rows[-1]
    if "faults.crash_nodes=[2,3]" in extra:                          # crashed from round 1 on
        assert [r["clients_online"] for r in hist.rows[1:]] == [6, 4, 4]     # after rounds 0, 1, 2


@pytest.mark.parametrize("method,extra", [("dfedavg", ["local_steps=2", "local_epochs=null"]),
                                          ("dfedsam", ["local_steps=2", "local_epochs=null"])])
def test_per_node_fused_update_path(fake_data, monkeypatch, method, extra):
    """Large linear layers (LeNet's/the CNN's fc1 on real inputs) are updated node by node through
    torch's fused SGD kernel, with and without momentum: force that path on the small test model."""
    from vecgossip.core import optim
    monkeypatch.setattr(optim, "PER_NODE_BYTES", 0)
    test_engine_matches_per_client_loop(fake_data, method, ["topology=ring", *extra], torch.float64)


def test_mgs_is_q_multiplications_by_w():
    from vecgossip.network.mixing import mixing_operator, uniform_mixing
    g = build("ring", 7)
    w = uniform_mixing(g)
    x = torch.randn(7, 11, dtype=torch.float64)
    want = np.linalg.matrix_power(w.toarray(), 4) @ x.numpy()
    sparse = mixing_operator(w, "cpu", torch.float64)
    assert sparse.layout == torch.strided                  # a ring of 7 is dense enough for one GEMM
    from vecgossip.network.mixing import to_torch_csr
    for op in (sparse, to_torch_csr(w, "cpu", torch.float64)):
        got, _ = gossip(op, x.clone(), 4)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)
    # gossip keeps the mean (W doubly stochastic) and contracts the spread
    got, _ = gossip(torch.from_numpy(w.toarray()), x.clone(), 4)
    torch.testing.assert_close(got.mean(0), x.mean(0))
    assert (got - got.mean(0)).norm() < (x - x.mean(0)).norm()


def test_random_topology_is_a_new_graph_every_round(fake_data):
    cfg, engine = engine_for("dfedavg", ["topology=random", "clients=12", "degree=4", "local_steps=1",
                                         "local_epochs=null"])
    graphs = RandomGraphs(12, 4, 0)
    seen = set()
    for t in range(5):
        w_t, degree, w_sp = engine.mixing.at(t)
        np.testing.assert_allclose(w_sp.toarray(), reference.dfl.mixing_matrix(graphs.at(t)), atol=1e-7)
        np.testing.assert_allclose(w_t.to_dense().numpy() if w_t.layout != torch.strided else w_t.numpy(),
                                   reference.dfl.mixing_matrix(graphs.at(t)), atol=1e-7)
        deg = graphs.at(t).degrees()
        assert deg.max() <= 4 and degree == deg.mean()
        seen.add(graphs.at(t).edges.tobytes())
    assert len(seen) == 5                                   # redrawn every round
    assert np.array_equal(graphs.at(3).edges, RandomGraphs(12, 4, 0).at(3).edges)   # a pure function of (seed, t)
