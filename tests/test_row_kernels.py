"""The CPU's in-place steps on some rows of the stacked state (vecgossip/core/row_kernels.py, issue
56): Eq. 1's average and the Caffe SGD step on the rows where they lie, against per-node loops of
the rule written out (plain nn.Modules and their autograd gradients, Eq. 1 by hand), and against
the GPU's path (gather, step, write back) run on the CPU. Rows not named must not move at all."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import synthetic_dataset
from vecgossip.core.device import force_gpu_paths
from vecgossip.core.optim import SGDConfig, loss_and_grad, sgd_update_rows
from vecgossip.core.state import Layout, flatten, init_theta, load_flat, new_state
from vecgossip.engines.tick.buffer import Buffers, average_full
from vecgossip.engines.tick.training import train_rows
from vecgossip.models import get_model, make_forward, vmap_forward

N, B = 6, 8
ROWS = np.array([4, 0, 3])          # a subset, not in order
LEFT = np.setdiff1d(np.arange(N), ROWS)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("per_node", [False, True])
@pytest.mark.parametrize("momentum", [0.9, 0.0])
def test_sgd_on_rows_in_place_matches_caffe_rule_per_node(monkeypatch, per_node, momentum):
    """Nodes at different iteration counts (lr), weight decay, bias lr x2, a momentum left from
    before; the factored MLP weights batched or node by node (PER_NODE_BYTES), the biases dense.
    Each node against Caffe's rule written out on its own module's autograd gradient."""
    from vecgossip.core import optim
    monkeypatch.setattr(optim, "PER_NODE_BYTES", 0 if per_node else 1 << 40)
    cfg = SGDConfig(momentum=momentum)  # inv, wd 5e-4, bias lr x2
    model = get_model("mlp")
    layout = Layout.of(model.factory())
    init = init_theta(layout, N, "caffe_xavier", torch.Generator().manual_seed(1)).double()
    state = new_state(layout, init.clone())
    state.iters[:] = torch.tensor([0, 10, 20, 4000, 30000, 7])
    state.momentum.normal_(0, 1e-3, generator=torch.Generator().manual_seed(3))
    if momentum == 0:                   # never read: a momentum of 0 ignores the old buffer
        state.momentum[ROWS] = float("nan")
    mom0 = state.momentum.clone()
    g = torch.Generator().manual_seed(5)
    x, y = torch.rand(ROWS.size, B, 1, 28, 28, generator=g).double(), torch.randint(0, 10, (ROWS.size, B), generator=g)
    ix = torch.from_numpy(ROWS)
    _, grads = loss_and_grad(make_forward("mlp"), layout, state.theta[ix], x, y)
    assert any(isinstance(gr, optim.Factored) for gr in grads) and any(not isinstance(gr, optim.Factored)
                                                                          for gr in grads)
    sums = sgd_update_rows(state.theta, state.momentum, ROWS, grads, state.iters[ix], layout, cfg)
    for k, i in enumerate(ROWS):
        net = model.factory().double()
        load_flat(net, layout, init[i])
        F.cross_entropy(net(x[k]), y[k]).backward()
        lr = 0.01 * (1 + 1e-4 * float(state.iters[i])) ** -0.75
        for s, (name, p) in zip(layout.specs, net.named_parameters()):
            mult = 2.0 if name.endswith("bias") else 1.0
            old = momentum * mom0[i, s.start:s.stop] if momentum else 0.0
            v = old + lr * mult * (p.grad.flatten() + 5e-4 * p.detach().flatten())
            if momentum:                    # (with none, the buffer is no part of the rule: left or overwritten)
                assert rel_err(state.momentum[i, s.start:s.stop], v) <= 1e-12, (i, name)
            assert rel_err(state.theta[i, s.start:s.stop], p.detach().flatten() - v) <= 1e-12, (i, name)
        assert rel_err(init[i], state.theta[i]) > 1e-6                # it moved: the check is not vacuous
        assert abs(float(sums[k]) - float(state.theta[i].sum())) <= 1e-9 * float(state.theta[i].abs().sum())
    assert torch.equal(state.theta[LEFT], init[LEFT])                   # rows not named: untouched
    assert torch.equal(state.momentum[LEFT], mom0[LEFT])


def test_sgd_on_rows_guard_sums_flag_a_diverged_row():
    """A row whose step overflows has a non-finite sum, the others finite (the divergence guard); a
    row of finite parameters past ~1e34 each is flagged too, as torch's float32 row sum flags it."""
    layout = Layout.of(get_model("mlp").factory())
    state = new_state(layout, init_theta(layout, N, "caffe_xavier", torch.Generator().manual_seed(1)))
    state.theta[3, :100] = 3e38                                         # w - lr v overflows in float32
    state.momentum[0] = 1e35        # the step leaves finite parameters of about -9e34, their float32 sum is not
    g = torch.Generator().manual_seed(2)
    x, y = torch.rand(ROWS.size, B, 1, 28, 28, generator=g), torch.randint(0, 10, (ROWS.size, B), generator=g)
    ix = torch.from_numpy(ROWS)
    _, grads = loss_and_grad(make_forward("mlp"), layout, state.theta[ix], x, y)
    sums = sgd_update_rows(state.theta, state.momentum, ROWS, grads, state.iters[ix], layout,
                           SGDConfig(weight_decay=1.0, lr=1.0))
    assert torch.isfinite(sums).tolist() == [True, False, False]
    assert bool(torch.isfinite(state.theta[0]).all())
    assert torch.isfinite(state.theta[ix].sum(1)).tolist() == [True, False, False]    # torch's own row sums agree


def test_eq1_average_in_place_matches_hand_rule_and_the_gathered_path():
    """Eq. 1, new = beta own + (1 - beta) mean(buffer), for the nodes whose buffer is full (per
    node, by hand), their buffers emptied; the GPU's gathered path gives the same numbers."""
    g = torch.Generator().manual_seed(0)
    layout = Layout.of(get_model("mlp").factory())
    p, beta, held = layout.size, 0.3, [2, 0, 1, 3, 2, 1]

    def filled():
        buf = Buffers.empty(N, p, len(layout.weights), "cpu", torch.float64)
        buf.total.normal_(generator=g)
        buf.held[:] = held
        buf.count.copy_(torch.from_numpy(buf.held))
        return buf

    theta0 = torch.randn(N, p, generator=g, dtype=torch.float64)
    size = np.full(N, 2.0)
    buf = filled()
    total0 = buf.total.clone()
    theta = theta0.clone()
    nodes = average_full(theta, buf, size, beta, False, layout)
    assert nodes.tolist() == [0, 3, 4]
    for i in range(N):
        if i in nodes:
            want = beta * theta0[i] + (1 - beta) * total0[i] / held[i]
            assert rel_err(theta[i], want) <= 1e-14, i
            assert not buf.total[i].any() and buf.count[i] == 0 and buf.held[i] == 0
        else:
            assert torch.equal(theta[i], theta0[i]) and torch.equal(buf.total[i], total0[i])
    gathered, buf2 = theta0.clone(), filled()
    buf2.total.copy_(total0)
    with force_gpu_paths():
        average_full(gathered, buf2, size, beta, False, layout)
    torch.testing.assert_close(theta, gathered, rtol=1e-14, atol=1e-15)
    assert torch.equal(buf.total, buf2.total) and torch.equal(buf.count, buf2.count)


class TinyBN(nn.Module):
    """A small model with BatchNorm running statistics in the state's buffer columns."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn, self.fc = nn.Conv2d(1, 3, 5, stride=3), nn.BatchNorm2d(3), nn.Linear(3 * 8 * 8, 10)

    def forward(self, x):
        return self.fc(F.relu(self.bn(self.conv(x))).flatten(1))


@pytest.mark.parametrize("model", ["lenet", "mlp", "bn"])
def test_train_rows_in_place_equals_the_gathered_path(model):
    """train_rows on a subset in chunks: the CPU's in-place step and the GPU's path (gather, step,
    write back) leave the same state (float64), BatchNorm's running statistics included; a row made
    non-finite is reported by both."""
    if model == "bn":
        module = TinyBN().double()
        layout, forward = Layout.of(module), vmap_forward(module)
    else:
        layout, forward = Layout.of(get_model(model).factory()), make_forward(model)
    init = init_theta(layout, N, "caffe_xavier", torch.Generator().manual_seed(1)).double()
    if layout.buffers:                                  # the module's running statistics (mean 0, variance 1)
        init[:, layout.params_size:] = flatten(module)[layout.params_size:]
    init[3, 7] = float("nan")
    data = dataclasses.replace(synthetic_dataset(100), dtype=torch.float64)
    images = torch.randint(0, 100, (ROWS.size, B), generator=torch.Generator().manual_seed(4))
    states = []
    for gpu in (False, True):
        state = new_state(layout, init.clone())
        state.iters[:] = torch.arange(N) * 100
        with force_gpu_paths(gpu):
            bad = train_rows(state, ROWS, images, None, data, forward, [(ROWS.size, SGDConfig())], chunk=2)
        assert ROWS[bad].tolist() == [3]
        states.append(state)
    a, b = states
    torch.testing.assert_close(a.theta, b.theta, rtol=1e-12, atol=1e-14, equal_nan=True)
    torch.testing.assert_close(a.momentum, b.momentum, rtol=1e-12, atol=1e-14, equal_nan=True)
    assert torch.equal(a.iters, b.iters)
    assert torch.equal(a.theta[LEFT], init[LEFT])
    moved = a.theta[[0, 4]] - init[[0, 4]]
    assert float(moved[:, :layout.params_size].abs().max()) > 1e-6
    if layout.buffers:                                  # the running statistics were updated and kept
        assert float(moved[:, layout.params_size:].abs().max()) > 1e-6
