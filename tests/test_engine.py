"""The vectorized tick engine against a plain per-node loop twin: nn.Modules, Python lists as
buffers, per-node Eq. 1 and Algorithm 3. Both draw batches and T_acq from identically seeded
generators in the same order, so they must agree to float tolerance.

Multi-tick twins run in float64 (1e-10): in float32 a ReLU decision within float noise of its tie
can be flipped by either side's rounding and the trajectories then part, by an amount that
depends on how the CPU's kernels round (test_rounds.py, CASES). float32 is checked one tick at a
time (every node's first step, send and average from the same initial models), under one-ulp
perturbations of the engine's initial models and two thread counts."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from conftest import synthetic_dataset, torch_threads, ulp_moved
from vecgossip.data.sampling import dirichlet_label_probs
import reference.gossip
from settings import TickSetting, tick_engine
from vecgossip.engines.tick.engine import TickEngine
from vecgossip.network.peers import Links
from vecgossip.models import get_model, make_forward
from vecgossip.core.optim import SGDConfig
from vecgossip.core.state import Layout, init_theta, new_state
from vecgossip.network.topology import random_regular

N, K, TICKS = 6, 3, 25


def mlp_setting(seed: int, dtype: torch.dtype = torch.float64):
    """The tests' small setting: an N-node K-regular graph, 300 synthetic images (batches in
    ``dtype``), the MLP's layout and seeded initial models (in ``dtype``)."""
    layout = Layout.of(get_model("mlp").factory())
    data = dataclasses.replace(synthetic_dataset(300), dtype=dtype)
    return (random_regular(N, K, seed), data, layout,
            init_theta(layout, N, "caffe_xavier", torch.Generator().manual_seed(seed)).to(dtype))


def mlp_engine(cfg: TickSetting, graph, data, layout, init, seed: int, probs=None, faults=None, **kw) -> TickEngine:
    """A tick engine on that setting, its generators seeded with ``seed``, evaluating 10 images."""
    return tick_engine(cfg, new_state(layout, init.clone()), Links(graph), make_forward("mlp"), SGDConfig(), data,
                      probs, data.batch(torch.arange(10))[0], data.labels[:10], torch.Generator().manual_seed(seed),
                      np.random.default_rng(seed), faults=faults, **kw)


@pytest.mark.parametrize("t_acq,R,beta,correction,alpha", [
    ((10, 10), 1, 0.5, False, None),
    ((1, 4), 1, 0.0, True, 0.5),     # asynchronous: repeated senders in one buffer
    ((1, 6), 2, 0.5, True, None),    # R = 2
])
def test_engine_matches_loop_twin(t_acq, R, beta, correction, alpha):
    seed = 7
    graph, data, layout, init = mlp_setting(seed)
    probs = dirichlet_label_probs(N, alpha, np.random.default_rng(1))
    cfg = TickSetting(t_acq=t_acq, R=R, beta=beta, correction=correction, batch_size=16)
    engine = mlp_engine(cfg, graph, data, layout, init, seed, probs=probs)
    for t in range(TICKS):
        engine.tick(t)
    want, iters = reference.gossip.run(init, graph, data, probs, cfg, R, seed, TICKS)
    assert engine.state.iters.tolist() == iters
    assert engine.t_first_average is not None
    rel = (engine.state.theta - want).norm(dim=1) / want.norm(dim=1)
    assert rel.max() <= 1e-10, rel
    assert (engine.state.theta - init).norm() > 1e-2 * init.norm()  # it really trained and averaged


@pytest.mark.parametrize("ulp_seed,threads", [(0, None), (1, 1), (2, 2), (3, 1)])
@pytest.mark.parametrize("t_acq,R,beta,correction,alpha", [
    ((10, 10), 1, 0.5, False, None),
    ((1, 4), 1, 0.0, True, 0.5),
])
def test_float32_tick_matches_loop_twin(t_acq, R, beta, correction, alpha, ulp_seed, threads):
    """float32, tick 0 (every node trains one step, sends, and averages its full buffer) from the
    same initial models: the two sides differ by that tick's rounding alone, whatever the rounding:
    ``ulp_seed`` > 0 moves each of the engine's initial parameters by one ulp up or down, ``threads``
    runs the engine under that many threads."""
    seed = 7
    graph, data, layout, init = mlp_setting(seed, torch.float32)
    probs = dirichlet_label_probs(N, alpha, np.random.default_rng(1))
    cfg = TickSetting(t_acq=t_acq, R=R, beta=beta, correction=correction, batch_size=16)
    engine = mlp_engine(cfg, graph, data, layout, ulp_moved(init, ulp_seed), seed, probs=probs)
    with torch_threads(threads):
        engine.tick(0)
    want, iters = reference.gossip.run(init, graph, data, probs, cfg, R, seed, 1)
    assert engine.state.iters.tolist() == iters == [1] * N
    assert engine.t_first_average == 0                                   # tick 0 averaged
    rel = (engine.state.theta - want).norm(dim=1) / want.norm(dim=1)
    assert rel.max() <= 1e-5, rel
    assert (engine.state.theta - init).norm() > 1e-2 * init.norm()


FAULTS = [
    dict(drop=0.3),
    dict(offline=0.25),
    dict(drop=0.2, offline=0.1, crash_at=5, rejoin_at=15, crash_nodes=(1, 4)),
    dict(drop=0.6, crash_at=3, crash_nodes=(0,)),             # crash-stop: neighbours rely on the timeout
]


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("t_acq,correction", [((10, 10), False), ((1, 4), True)])
def test_faulty_engine_matches_loop_twin(fault, t_acq, correction):
    """Lost messages, offline nodes, crash and rejoin, and the buffer timeout, against the twin
    consuming an identically seeded Faults."""
    from vecgossip.core.faults import FaultConfig, Faults
    seed = 7
    graph, data, layout, init = mlp_setting(seed)
    cfg = TickSetting(t_acq=t_acq, R=1, beta=0.0, correction=correction, batch_size=16, timeout=6)
    fc = FaultConfig(**fault)
    engine = mlp_engine(cfg, graph, data, layout, init, seed, faults=Faults(fc, N, np.random.default_rng(11)))
    for t in range(TICKS):
        engine.tick(t)
    want, iters = reference.gossip.run(init, graph, data, None, cfg, 1, seed, TICKS,
                                           faults=Faults(fc, N, np.random.default_rng(11)))
    assert engine.state.iters.tolist() == iters
    rel = (engine.state.theta - want).norm(dim=1) / want.norm(dim=1)
    assert rel.max() <= 1e-10, rel
    assert engine.faults.lost > 0 or fc.drop == 0
    assert engine.t_first_average is not None


def test_zero_fault_probabilities_are_the_fault_free_engine_bit_for_bit():
    from vecgossip.core.faults import FaultConfig, Faults
    setting = mlp_setting(3)
    out = []
    for faults in (None, Faults(FaultConfig(drop=0.0, offline=0.0), N, np.random.default_rng(0))):
        cfg = TickSetting(t_acq=(1, 4), beta=0.0, correction=True, batch_size=8)
        eng = mlp_engine(cfg, *setting, 0, faults=faults)
        for t in range(20):
            eng.tick(t)
        out.append(eng.state.theta)
    assert torch.equal(out[0], out[1])


def test_drop_all_means_nobody_ever_averages_and_offline_nodes_are_untouched():
    from vecgossip.core.faults import FaultConfig, Faults
    setting = mlp_setting(3)

    def engine(fc):
        cfg = TickSetting(t_acq=(1, 3), beta=0.0, batch_size=8, timeout=4)
        return mlp_engine(cfg, *setting, 0, faults=Faults(fc, N, np.random.default_rng(1)))
    eng = engine(FaultConfig(drop=1.0))
    for t in range(30):
        eng.tick(t)
    assert eng.t_first_average is None and eng.faults.lost == eng.faults.sent > 0
    assert (eng.buffers.count == 0).all()
    eng = engine(FaultConfig(crash_at=5, rejoin_at=20, crash_nodes=(2, 5)))
    for t in range(6):
        eng.tick(t)
    frozen = eng.state.theta[[2, 5]].clone()
    for t in range(6, 20):
        eng.tick(t)
        assert torch.equal(eng.state.theta[[2, 5]], frozen)         # offline: no training, no averaging
    for t in range(20, 30):
        eng.tick(t)
    assert not torch.equal(eng.state.theta[[2, 5]], frozen)         # back after rejoining


def test_training_chunk_size_does_not_change_results():
    graph, data, layout, init = mlp_setting(3)
    out = []
    for chunk in (2, 256):
        cfg = TickSetting(t_acq=(1, 3), beta=0.0, correction=True, batch_size=8, train_chunk=chunk)
        eng = mlp_engine(cfg, graph, data, layout, init, 0)
        for t in range(12):
            eng.tick(t)
        out.append(eng.state.theta)
    torch.testing.assert_close(out[0], out[1], rtol=1e-5, atol=1e-6)
    assert not torch.equal(out[0], init)


def test_private_engine_matches_loop_twin():
    """DP-SGD on the tick clock (privacy.*): each due node's Caffe step takes its clipped per-sample
    sum plus its own noise stream at its step count; against the twin's torch.func per-sample
    gradients (reference.dp.private_grad), asynchronous T_acq, correction on, float64."""
    from vecgossip.privacy import PrivacyConfig
    from vecgossip.privacy.private import PrivateTraining
    seed = 7
    graph, data, layout, init = mlp_setting(seed)
    probs = dirichlet_label_probs(N, 0.5, np.random.default_rng(1))
    cfg = TickSetting(t_acq=(1, 4), R=1, beta=0.0, correction=True, batch_size=16)
    private = PrivateTraining(PrivacyConfig(noise_multiplier=0.7, clip=0.5), 3, np.full(N, 0.01))
    engine = mlp_engine(cfg, graph, data, layout, init, seed, probs=probs, privacy=private)
    for t in range(TICKS):
        engine.tick(t)
    want, iters = reference.gossip.run(init, graph, data, probs, cfg, 1, seed, TICKS, private=(0.5, 0.7, 3))
    assert engine.state.iters.tolist() == iters == private.steps.tolist()
    rel = (engine.state.theta - want).norm(dim=1) / want.norm(dim=1)
    assert rel.max() <= 1e-10, rel
    plain = mlp_engine(cfg, graph, data, layout, init, seed, probs=probs)
    for t in range(TICKS):
        plain.tick(t)
    assert (plain.state.theta - engine.state.theta).norm() > 1e-3 * init.norm()    # the noise did act
