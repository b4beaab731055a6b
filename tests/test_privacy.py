"""Differential privacy (issue 38): DP-SGD's per-sample gradients against Opacus's, the noise
streams' scale and independence, the accountant against Opacus and Google's dp-accounting called
directly, a DP round against a client-by-client twin, Muffliato's network bound by hand, and the
``privacy.*`` options at the config boundary."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import reference.dp
from conftest import run_of
from test_config import make
from test_rounds import engine_for, fake_data, twin_inputs  # noqa: F401  (a fixture)
from vecgossip.core.state import Layout, flatten
from vecgossip.models import build as build_model, get_model
from vecgossip.privacy.accounting import epsilon
from vecgossip.privacy.dpsgd import clipped_sum, node_noise, per_sample_grads, private_grads


def forward_of(name, shape, classes):
    from vecgossip.composition.parts import model_parts
    cfg = run_of(make([f"model={name}", "data=cifar10", "method=dfedavg"])).cfg
    return model_parts(cfg, shape, classes)[1]


@pytest.mark.parametrize("name,shape", [("cnn", (3, 16, 16)), ("lenet", (1, 28, 28))])
def test_per_sample_grads_match_opacus(name, shape):
    """Two nodes' per-sample gradients (one batched forward over nodes x samples) against Opacus's
    GradSampleModule on each node's plain module and the same batch."""
    from opacus import GradSampleModule
    torch.manual_seed(0)
    nets = [build_model(name, shape, 5).double() for _ in range(2)]
    layout = Layout.of(nets[0])
    theta = torch.stack([flatten(n) for n in nets])
    forward = forward_of(name, shape, 5)
    x = torch.randn(2, 6, *shape, dtype=torch.float64)
    y = torch.randint(0, 5, (2, 6))
    _, grads = per_sample_grads(forward, layout, theta, x, y)
    for i, net in enumerate(nets):
        gsm = GradSampleModule(net)
        F.cross_entropy(gsm(x[i]), y[i]).backward()      # loss_reduction="mean", its default
        for g, (pname, p) in zip(grads, net.named_parameters()):
            assert torch.allclose(g[i], p.grad_sample, rtol=1e-9, atol=1e-12), pname
        gsm._close()


def test_clipping_bounds_every_sample_and_keeps_small_ones():
    g = [torch.tensor([[[3.0, 4.0], [0.3, 0.4]]]), torch.zeros(1, 2, 1)]     # norms 5 and 0.5
    sums, norms = clipped_sum(g, 1.0, None)
    assert torch.allclose(norms, torch.tensor([[5.0, 0.5]]))
    want = torch.tensor([3.0, 4.0]) / (5 + 1e-6) + torch.tensor([0.3, 0.4])     # clipped to 1, kept
    assert torch.allclose(sums[0][0], want)
    sums, _ = clipped_sum(g, 1.0, torch.tensor([[1.0, 0.0]]))                    # padding: no share
    assert torch.allclose(sums[0][0], torch.tensor([3.0, 4.0]) / (5 + 1e-6))


def test_private_gradient_is_clipped_mean_plus_scaled_noise():
    """With one sample per node the private gradient is clip(g) + sigma C z: its norm is exactly
    ||clip(g) + sigma C z||, checked against the parts computed here."""
    forward = forward_of("cnn", (3, 16, 16), 5)
    torch.manual_seed(1)
    net = build_model("cnn", (3, 16, 16), 5).double()
    layout = Layout.of(net)
    theta = flatten(net)[None].repeat(3, 1)
    x, y = torch.randn(3, 1, 3, 16, 16, dtype=torch.float64), torch.randint(0, 5, (3, 1))
    z = torch.randn(3, layout.params_size, dtype=torch.float64)
    _, raw = per_sample_grads(forward, layout, theta, x, y)
    _, priv = private_grads(forward, layout, theta, x, y, None, 0.5, 2.0, z)
    flat_raw = torch.cat([g.reshape(3, -1) for g in raw], 1)
    clipped = flat_raw * (0.5 / (flat_raw.norm(dim=1, keepdim=True) + 1e-6)).clamp(max=1)
    want = clipped + 2.0 * 0.5 * z
    got = torch.cat([g.reshape(3, -1) for g in priv], 1)
    assert torch.allclose(got, want, rtol=1e-10, atol=1e-12)


def test_noise_streams_are_standard_normal_independent_and_reproducible():
    nodes = np.repeat(np.arange(40), 5)
    steps = np.tile(np.arange(5), 40)
    z = node_noise(np.array([7]), nodes, steps, 20_000, torch.float64, torch.device("cpu"))
    assert abs(float(z.mean())) < 0.002 and abs(float(z.std()) - 1) < 0.002        # 4e6 draws: sd 5e-4
    c = torch.corrcoef(z)                                   # 200 streams (nodes x steps) pairwise
    off = c[~torch.eye(200, dtype=torch.bool)]
    assert off.abs().max() < 0.04                           # |r| of independent 20,000-vectors: sd 0.007
    again = node_noise(np.array([7]), nodes[::-1].copy(), steps[::-1].copy(), 20_000, torch.float64, torch.device("cpu"))
    assert torch.equal(again.flip(0), z)                    # a stream is its key's, whatever the order
    other = node_noise(np.array([8]), nodes[:1], steps[:1], 20_000, torch.float64, torch.device("cpu"))
    assert abs(float(torch.corrcoef(torch.stack([z[0], other[0]]))[0, 1])) < 0.04   # another seed: another stream


@pytest.mark.parametrize("sigma,q,steps", [(1.0, 0.01, 1000), (0.8, 0.05, 300), (2.0, 1.0, 10)])
def test_accountant_matches_the_libraries_called_directly(sigma, q, steps):
    from opacus.accountants import RDPAccountant
    acc = RDPAccountant()
    for _ in range(steps):
        acc.step(noise_multiplier=sigma, sample_rate=q)
    assert epsilon(sigma, q, steps, 1e-5) == pytest.approx(acc.get_epsilon(1e-5), rel=1e-12)
    import dp_accounting                                   # Google's, an independent implementation
    rdp = dp_accounting.rdp.RdpAccountant()
    rdp.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
    assert epsilon(sigma, q, steps, 1e-5) == pytest.approx(rdp.get_epsilon(1e-5), rel=0.05)
    assert epsilon(sigma, q, 0, 1e-5) == 0 and epsilon(0.0, q, steps, 1e-5) == math.inf


@pytest.mark.parametrize("method,extra", [
    ("dpsgd", ["topology=ring"]),
    ("dfedavgm", ["topology=ring", "local_steps=2", "local_epochs=null"]),
    ("muffliato", ["topology=ring", "gossip_steps=3"]),
    ("muffliato", ["topology=ring", "gossip_steps=4", "algorithm.chebyshev=true"]),
])
def test_dp_rounds_match_per_client_loop(fake_data, method, extra):  # noqa: F811
    cfg, engine = engine_for(method, [*extra, "privacy.noise_multiplier=0.7", "privacy.clip=0.5"], torch.float64)
    init = engine.state.theta.clone()
    sampler, _ = twin_inputs(engine)
    engine.run(progress=False)
    want = reference.dp.run(cfg, engine, sampler, init)
    got = engine.state.theta
    rel = (got - want).norm(dim=1) / want.norm(dim=1)
    assert rel.max() < 1e-10, rel
    assert (got - init).norm() > 1e-3 * init.norm()
    k = cfg.engine.local_steps
    assert engine.privacy.steps.tolist() == [k * cfg.engine.rounds] * engine.m


def test_dp_does_not_depend_on_the_chunk(fake_data):  # noqa: F811
    out = []
    for chunk in (1, 4):
        _, engine = engine_for("dpsgd", ["topology=ring", "privacy.noise_multiplier=1.0",
                                         f"engine.train_chunk={chunk}"], torch.float64)
        engine.run(progress=False)
        out.append(engine.state.theta.clone())
    assert torch.allclose(out[0], out[1], rtol=0, atol=1e-12)


def test_chebyshev_gossip_keeps_the_average_and_contracts_faster():
    """P_K(W) from the semi-iterative weights (muffliato.chebyshev_weights) on a ring of 16, W's
    |lambda_2| = (1 + 2 cos(2 pi / 16)) / 3 by hand: the average is kept (every P_K(1) = 1) and the
    disagreement after K = 8 steps is below plain gossip's lambda_2^8 bound and below W^8's."""
    from vecgossip.algorithms.muffliato import chebyshev_weights
    n, k = 16, 8
    w = np.zeros((n, n))
    for i in range(n):
        w[i, i] = w[i, (i + 1) % n] = w[i, (i - 1) % n] = 1 / 3
    lam = (1 + 2 * math.cos(2 * math.pi / n)) / 3
    x = np.random.default_rng(0).normal(size=(n, 5))
    prev, cur = x, w @ x
    for om in chebyshev_weights(lam, k)[1:]:
        prev, cur = cur, om * (w @ cur) + (1 - om) * prev
    plain = np.linalg.matrix_power(w, k) @ x
    dev = lambda v: np.linalg.norm(v - v.mean(0))                           # noqa: E731
    assert np.allclose(cur.mean(0), x.mean(0), atol=1e-12)
    assert dev(cur) < 0.5 * dev(plain) and dev(plain) <= lam ** k * dev(x) + 1e-12


def test_private_run_reports_epsilon_stops_at_its_target_and_bounds_the_network(tmp_path):
    """Muffliato on real MNIST through the API: epsilon in every evaluation row (0 before any step,
    then growing), privacy.target_epsilon stops the run before the round that would pass it, and
    summary.json carries the options, the local epsilon and the pairwise network bound (every pair's
    epsilon at most the unamplified local one; on a ring of 8 with 4 gossip steps a node's view reaches
    the whole ring, so every pair's bound IS the local one: no amplification there)."""
    import vecgossip
    r = vecgossip.run("muffliato", run_dir=tmp_path / "run", overrides=[
        "data=mnist", "model=lenet", "clients=8", "topology=ring", "rounds=6", "eval_every=1",
        "data.local_test_size=10", "data.global_test_size=100", "privacy.target_epsilon=1.15"])
    eps = r.metrics["epsilon_max"].tolist()
    assert eps[0] == 0 and all(a < b for a, b in zip(eps, eps[1:])) and eps[-1] <= 1.15
    p = r.summary["privacy"]
    assert r.summary["stopped"].startswith("privacy.target_epsilon=1.15") and len(eps) < 7
    assert p["noise_multiplier"] == 1.0 and p["clip"] == 1.0 and p["accountant"] == "rdp" and p["per_sample"] == "factored"
    assert p["epsilon"]["max"] == pytest.approx(eps[-1]) and p["steps"]["max"] == len(eps) - 1
    from opacus.accountants import RDPAccountant                 # the same epsilon from Opacus directly
    acc = RDPAccountant()
    acc.history = [(1.0, p["sampling_rate"]["max"], p["steps"]["max"])]
    assert p["epsilon"]["max"] == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)
    net = p["network"]
    assert net["reported"] and net["rounds"] == p["steps"]["max"] and net["gossip_steps"] == 4
    assert net["epsilon_pair_mean"] == pytest.approx(net["epsilon_pair_max"]) == pytest.approx(net["epsilon_local_unamplified"])
    assert "linear Gaussian" in net["bound"] and p["noise_multiplier_from"] == "configured"


@pytest.mark.parametrize("name,shape", [("lenet", (1, 28, 28)), ("cnn", (3, 16, 16)), ("mlp", (1, 28, 28))])
def test_factored_clipped_sums_equal_the_materialised_ones(name, shape):
    """The factored path (ghost norms of the linear layers, unfolded per-sample convolutions) gives
    the clipped sum of the per-sample gradients materialised one copy per sample (the path checked
    against Opacus above), padding samples (weight 0) left out; on LeNet (convolutions grouped over
    nodes), the CNN (on the CPU: node by node) and the MLP (linear layers only)."""
    from vecgossip.privacy.dpsgd import FACTORED, factored_clipped_sums
    torch.manual_seed(1)
    forward = forward_of(name, shape, 10)
    nets = [build_model(name, shape, 10).double() for _ in range(3)]
    layout = Layout.of(nets[0])
    theta = torch.stack([flatten(n) for n in nets])
    x, y = torch.randn(3, 5, *shape, dtype=torch.float64), torch.randint(0, 10, (3, 5))
    w = torch.ones(3, 5, dtype=torch.float64)
    w[1, 3:] = 0
    ce, grads = per_sample_grads(forward, layout, theta, x, y)
    clip = float(clipped_sum(grads, 1.0, None)[1].median())       # some samples clipped, some kept
    want, norms = clipped_sum(grads, clip, w)
    assert (norms > clip).any() and (norms < clip).any()
    got = factored_clipped_sums(forward.paths["batched"], layout, theta, x, y, w, clip)
    assert got is not None
    for a, b in zip(got[1], want):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-13)
    assert torch.allclose(got[0], ce, rtol=1e-12)
    private_grads(forward, layout, theta, x, y, w, 0.5, 1.0, torch.zeros(3, layout.params_size, dtype=torch.float64))
    assert FACTORED[forward.paths["batched"]] is True             # the engine's step takes this path


def test_privacy_report_by_hand(tmp_path):
    """privacy.md from hand-made runs: the noise levels are columns (strongest first, the
    non-private run last as epsilon inf), seeds pooled within one, mean ± sd in %, the worst
    client's in brackets, a run with the network bound in the second table, the plot written."""
    import pandas as pd
    from vecgossip.report import privacy as rp
    nan = float("nan")
    row = dict(topology="ring", clients=16, local="K=1", rounds=500, gossip_steps=1, model="mlp", data="MNIST",
               partition="iid", batch=128, epsilon_pair_mean=nan,
               epsilon_pair_max=nan, epsilon_local_unamplified=nan)
    runs = pd.DataFrame([
        {**row, "method": "dpsgd", "noise_multiplier": 3.0, "epsilon": 1.0, "acc_mean": 0.80, "acc_min": 0.7,
         "options": "privacy.noise_multiplier=3.0, seed=0"},
        {**row, "method": "dpsgd", "noise_multiplier": 3.0, "epsilon": 1.0, "acc_mean": 0.84, "acc_min": 0.74,
         "options": "privacy.noise_multiplier=3.0, seed=1"},
        {**row, "method": "dpsgd", "noise_multiplier": 1.0, "epsilon": 5.0, "acc_mean": 0.88, "acc_min": 0.8,
         "options": "privacy.noise_multiplier=1.0, seed=0"},
        {**row, "method": "dpsgd", "noise_multiplier": nan, "epsilon": nan, "acc_mean": 0.95, "acc_min": 0.9,
         "options": "privacy.noise_multiplier=None, seed=0"},
        {**row, "method": "muffliato", "noise_multiplier": 1.0, "epsilon": 5.0, "acc_mean": 0.9, "acc_min": 0.85,
         "gossip_steps": 4, "epsilon_pair_mean": 20.0, "epsilon_pair_max": 30.0, "epsilon_local_unamplified": 30.0,
         "options": "privacy.noise_multiplier=1.0, seed=0"},
    ])
    md = rp.report(tmp_path, runs)
    assert "## ring, 16 clients, mlp, MNIST, iid, batch 128" in md
    assert "| method (rounds × local steps) | σ=3 | σ=1 | no DP |" in md
    assert "| dpsgd (500 rounds × K=1) | ε=1.00: 82.0 ± 2.8 [72.0] (n=2) | ε=5.00: 88.0 [80.0] (n=1) | ε=∞: 95.0 [90.0] (n=1) |" in md
    assert "| ring | muffliato | 1 | 500 × 4 | 5.00 | 30.0 | 20.0 | 30.0 | 90.0 |" in md
    assert "| muffliato (500 rounds × K=1, 4 gossip steps) |  | ε=5.00: 90.0 [85.0] (n=1) |  |" in md
    assert (tmp_path / "privacy.png").stat().st_size > 10_000 and (tmp_path / "privacy.csv").exists()
    assert rp.report(tmp_path, runs.assign(noise_multiplier=nan)) == ""      # no private run: no report


def test_private_run_resumes_exactly(fake_data):  # noqa: F811
    """Stopped at round 2 and resumed from its checkpoint, a DP run continues every client's noise
    stream and step count: the same models, metrics (epsilon included) as the uninterrupted run."""
    import pandas as pd
    from test_baselines_platform import StopAt                   # the checkpointer that stops at a position

    extra = ["topology=ring", "rounds=4", "privacy.noise_multiplier=0.8", "local_steps=2", "local_epochs=null"]
    cfg, whole = engine_for("dfedavgm", extra)
    ref = whole.run(progress=False)
    stop = StopAt(2)
    _, first = engine_for("dfedavgm", extra)
    assert first.run(progress=False, checkpointer=stop).interrupted and stop.blob is not None
    assert first.privacy.steps.tolist() == [4] * first.m
    _, again = engine_for("dfedavgm", extra)
    hist = again.run(progress=False, resume=stop.blob)
    assert pd.DataFrame(hist.rows).equals(pd.DataFrame(ref.rows)) and ref.rows[-1]["epsilon_max"] > 0
    assert torch.equal(again.state.theta, whole.state.theta)
    assert again.privacy.steps.tolist() == [8] * again.m


TICK = ["+experiment=vc", "model=mlp", "nodes=10", "degree=4", "max_ticks=60", "eval_every=20",
        "privacy.noise_multiplier=1.0", "progress=false"]


def test_tick_run_accounts_sampling_with_replacement(tmp_path):
    """The tick engine (gossip learning, IID: uniform labels, then an image of that label) through
    the API on real MNIST: each node's rate is the chance that the most exposed image (label 5,
    MNIST's rarest: 5421 training images) is among the B draws, 1 - (1 - (1/10)/5421)^B; epsilon
    grows in metrics.csv; summary.json says which bound was applied."""
    import vecgossip
    r = vecgossip.run(run_dir=tmp_path / "run", overrides=TICK)
    p, b = r.summary["privacy"], 64                    # conf/data/mnist.yaml: batch_size 64
    assert r.summary["engine"] == "tick" and p["per_sample"] == "factored"
    assert p["sampling_rate"]["max"] == pytest.approx(1 - (1 - 0.1 / 5421) ** b, rel=1e-12)
    eps = r.metrics["epsilon_max"].tolist()
    assert eps[0] > 0 and all(a < c for a, c in zip(eps, eps[1:]))
    assert p["epsilon"]["max"] == pytest.approx(eps[-1], rel=1e-12)     # the last row is the final state
    assert p["steps"] == {"min": 6, "max": 6}                   # T_acq 10: ticks 0, 10, ..., 50
    assert "WITH replacement" in p["bound"] and r.summary["stopped"] is None


def test_tick_private_run_resumes_exactly():
    """Stopped at tick 20 and resumed, a private tick run equals the uninterrupted one (noise
    streams keyed by each node's step count, the step counts checkpointed)."""
    import pandas as pd
    import vecgossip
    from test_baselines_platform import StopAt
    from vecgossip.composition import tick

    cfg = vecgossip.compose(overrides=TICK)
    whole = tick.build_engine(run_of(cfg))
    ref = whole.run(progress=False)
    stop = StopAt(20)
    assert tick.build_engine(run_of(cfg)).run(progress=False, checkpointer=stop).interrupted
    again = tick.build_engine(run_of(cfg))
    hist = again.run(progress=False, resume=stop.blob)
    assert pd.DataFrame(hist.rows).equals(pd.DataFrame(ref.rows))
    assert torch.equal(again.state.theta, whole.state.theta)
    assert again.privacy.steps.tolist() == whole.privacy.steps.tolist() and whole.privacy.steps.min() > 0
