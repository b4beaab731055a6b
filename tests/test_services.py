"""The engines' services of the public algorithm interface (vecgossip.algorithms.RoundServices /
TickServices) against independent references: ``mix`` against W x computed with numpy, one fault
realization shared by every tensor mixed at a step, the tick engine's ``gradients`` against a plain
nn.Module's autograd, ``apply_sgd`` of those gradients against the built-in training step, and a
tick algorithm's own ``train`` never bypassed under replicas."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import run_of
import scipy.sparse as sp
import torch
import torch.nn.functional as F

import vecgossip
from vecgossip.algorithms import TickAlgorithm

sys.path.insert(0, str(Path(__file__).resolve().parent / "golden"))
import cases  # noqa: E402  (the synthetic data set "golden", registered through the public API)

COMMON = ["data.name=golden", "precision=fp64", "progress=false", "model=mlp"]
ROUNDS = [*COMMON, "method=dfedavg", "clients=6", "topology=ring", "rounds=2", "local_steps=1",
          "local_epochs=null", "data.batch_size=8", "data.local_test_size=10", "data.global_test_size=40"]
TICK = [*COMMON, "method=gossip", "nodes=6", "degree=2", "max_ticks=21", "t_acq=5", "data.batch_size=8"]


def round_engine(extra=()):
    from vecgossip.composition import rounds
    cases.register()
    return rounds.build_engine(run_of(vecgossip.compose(overrides=[*ROUNDS, *extra])))


def tick_engine(extra=()):
    from vecgossip.composition import tick
    cases.register()
    return tick.build_engine(run_of(vecgossip.compose(overrides=[*TICK, *extra])))


def ring_w(m: int) -> np.ndarray:
    """Metropolis-Hastings on a ring, by hand: 1/3 on self and both neighbours."""
    w = np.zeros((m, m))
    for i in range(m):
        for j in (i - 1, i, i + 1):
            w[i, j % m] = 1 / 3
    return w


def test_round_mix_is_w_times_x_for_any_node_first_tensor():
    e = round_engine()
    x = torch.randn(6, 3, 4, dtype=torch.float64)
    want = torch.from_numpy(np.einsum("ij,jab->iab", ring_w(6), x.numpy()))
    assert torch.allclose(e.mix(x, 0), want, atol=1e-14)
    assert e.messages(0) == 2.0                              # each client sends to its two neighbours
    assert e.n == e.m == 6 and tick_engine().n == 6          # ctx.n on both engines' contexts
    given = np.eye(6)
    given[0, 1], given[0, 0] = 0.5, 0.5                      # only client 0 hears from client 1
    y = e.mix(x, 0, w=given)
    assert torch.equal(y[1:], x[1:]) and torch.allclose(y[0], (x[0] + x[1]) / 2, atol=1e-15)
    assert e.messages(0, w=given) == pytest.approx(1 / 6)


def test_one_fault_realization_per_step_is_shared_by_every_tensor_mixed():
    """Under faults, two tensors mixed at the same (round, step) see the same lost messages (one
    message carries both), and the messages are counted once; the next step draws anew."""
    e = round_engine(["faults.drop=0.5"])
    e.online = np.ones(6, dtype=bool)
    x = torch.randn(6, 5, dtype=torch.float64)
    a = e.mix(x, 0)
    sent_once = e.faults.sent
    b = e.mix(2 * x, 0)
    assert torch.allclose(b, 2 * a, atol=1e-14) and e.faults.sent == sent_once == 12
    assert e.faults.lost > 0
    # the realised W: rows sum to 1, a lost message's weight moved to the receiver's own
    eye = torch.eye(6, dtype=torch.float64)
    w = e.mix(eye, 0)
    assert torch.allclose(w.sum(1), torch.ones(6, dtype=torch.float64))
    assert int(((w > 0) & (eye == 0)).sum()) == 12 - e.faults.lost
    e.mix(x, 0, step=1)
    assert e.faults.sent == 24                               # a new step: new draws


def plain_grads(e, rows, images) -> torch.Tensor:
    """Every node's gradient with a plain nn.Module (the MLP), loaded from the node's row."""
    from vecgossip.models import build as build_model
    from vecgossip.core.state import load_flat
    out = []
    data = e.train_data
    for r, img in zip(rows, images):
        net = build_model("mlp", data.shape, data.num_classes).double()
        load_flat(net, e.layout, e.state.theta[r])
        x, y = data.train_batch(img[None], None)
        F.cross_entropy(net(x[0]), y[0]).backward()
        out.append(torch.cat([p.grad.flatten() for p in net.parameters()]))
    return torch.stack(out)


def test_tick_gradients_equal_a_plain_module_and_apply_sgd_equals_the_training_step():
    e = tick_engine()
    nodes = np.array([1, 2, 4])
    gen = e.gen.get_state()
    _, images, _ = e.draw(nodes)                               # the draws gradients() will make
    e.gen.set_state(gen)
    grads = e.gradients(nodes)
    assert torch.allclose(grads, plain_grads(e, nodes, images), atol=1e-12)
    # the same draws through the built-in step and through gradients + apply_sgd
    ref = tick_engine()
    ref.gen.set_state(gen)
    ref.sgd_step(nodes)
    assert e.apply_sgd(nodes, grads).size == 0
    assert torch.allclose(e.state.theta, ref.state.theta, atol=1e-12)
    assert torch.equal(e.state.iters, ref.state.iters) and e.state.iters.tolist() == [0, 1, 1, 0, 1, 0]
    assert torch.allclose(e.state.momentum, ref.state.momentum, atol=1e-12)


def test_tick_mix_pairwise_average():
    e = tick_engine()
    w = sp.identity(6, format="lil")
    w[2, 2] = w[2, 5] = w[5, 5] = w[5, 2] = 0.5               # nodes 2 and 5 average
    before = e.state.theta.clone()
    after = e.mix(e.state.theta, w)
    assert torch.equal(after[[0, 1, 3, 4]], before[[0, 1, 3, 4]])
    assert torch.allclose(after[2], (before[2] + before[5]) / 2, atol=1e-15) and torch.allclose(after[5], after[2])


def test_tick_pairwise_averages_by_hand():
    """Pairs in order, then gradients: (1, 2) then (2, 4) gives x2 = ((x1 + x2) / 2 + x4) / 2,
    x1 = (x1 + x2) / 2, x4 = x2's; then nodes 1 and 4 step with their gradients (apply_sgd)."""
    e, ref = tick_engine(), tick_engine()
    x = e.state.theta.clone()
    nodes = np.array([1, 4])
    grads = torch.randn(2, x.shape[1], dtype=x.dtype, generator=torch.Generator().manual_seed(0)) * 1e-3
    assert e.pairwise_averages(nodes, [(1, 2), (2, 4)], grads.clone()).size == 0    # (the step may use it in place)
    want = x.clone()
    want[1] = (x[1] + x[2]) / 2
    want[2] = want[4] = (want[1] + x[4]) / 2
    ref.state.theta.copy_(want)
    ref.apply_sgd(nodes, grads)
    assert torch.allclose(e.state.theta, ref.state.theta, atol=1e-14)
    assert e.state.iters.tolist() == [0, 1, 0, 0, 1, 0]


class TrainTwice(TickAlgorithm):
    """A user's tick algorithm with its own training step: gradients + apply_sgd (= the built-in
    step), then the built-in gossip. ``calls`` counts the nodes it trained."""

    from vecgossip.algorithms.gossip import Params      # the preset's keys (beta, R, ...), read below
    calls = 0

    def train(self, ctx, t, nodes):
        TrainTwice.calls += nodes.size
        return ctx.apply_sgd(nodes, ctx.gradients(nodes))

    def after_train(self, ctx, t, senders, online):
        ctx.send_models(senders, online, t)
        ctx.average(t, online, self.params.beta, self.params.correction)


def test_a_tick_algorithm_s_own_train_runs_under_replicas_and_equals_the_built_in(tmp_path):
    TrainTwice.calls = 0
    mine = vecgossip.run(vecgossip.compose(overrides=[*TICK, "replicas=2",
                                                      "algorithm._target_=test_services.TrainTwice"]),
                         run_dir=tmp_path / "mine")
    assert TrainTwice.calls > 0 and mine.summary["replicas"] == 2
    ref = vecgossip.run(vecgossip.compose(overrides=[*TICK, "replicas=2"]), run_dir=tmp_path / "ref")
    got, want = mine.metrics.drop(columns=["replica"]), ref.metrics.drop(columns=["replica"])
    assert np.allclose(got.to_numpy(float), want.to_numpy(float), rtol=1e-9, atol=1e-12)
    assert len(got) == 2 * 3                                  # ticks 0, 10, 20 for each replica


def test_tick_mix_shares_one_fault_realization_per_tick_and_w():
    """Issue 37 (and 49): two mixes with the same W at one tick (the weighted models and the weights
    of an age-weighted merge, say) see the same lost messages, and those messages are counted
    once; an equal copy of W is the same matrix (issue 49: one fate per message and tick); a new
    tick draws anew. Before, every call drew its own losses and counted again."""
    e = tick_engine(["faults.drop=0.5"])
    e.schedule.due(0)                                  # tick 0 is being processed (who is online)
    w = sp.csr_matrix(ring_w(6))
    x = torch.randn(6, 5, dtype=torch.float64)
    first = e.mix(x, w)
    sent = e.faults.sent
    again = e.mix(x.clone(), w)
    assert torch.equal(first, again) and e.faults.sent == sent
    ones = e.mix(torch.ones(6, 1, dtype=torch.float64), w)
    assert torch.allclose(ones, torch.ones(6, 1, dtype=torch.float64))      # rows still sum to one
    other = e.mix(x, sp.csr_matrix(ring_w(6)))         # an equal copy: the same realization, not counted again
    assert torch.equal(other, first) and e.faults.sent == sent
    e.schedule.due(5)
    later = e.mix(x, w)
    assert e.faults.sent == 2 * sent and not torch.equal(later, first)
