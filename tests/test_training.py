"""Batched training step + Caffe SGD vs a per-node loop of plain nn.Modules (same seeds, batches)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from vecgossip.models import get_model, make_forward
from vecgossip.optim import SGDConfig, loss_and_grad, node_lr, sgd_update
from vecgossip.stack import Layout, flatten, init_theta, load_flat, new_state

N, B, STEPS = 3, 8, 5


def batches(seed: int):
    g = torch.Generator().manual_seed(seed)
    return [(torch.rand(N, B, 1, 28, 28, generator=g), torch.randint(0, 10, (N, B), generator=g))
            for _ in range(STEPS)]


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def batched_run(name: str, impl: str, cfg: SGDConfig, data) -> torch.Tensor:
    model = get_model(name)
    layout = Layout.of(model.factory())
    state = new_state(layout, init_theta(layout, N, "caffe_xavier", torch.Generator().manual_seed(1)))
    fwd = make_forward(name, impl)
    for x, y in data:
        _, grads = loss_and_grad(fwd, layout, state.theta, x, y)
        sgd_update(state.theta, state.momentum, grads, state.iters, layout, cfg)
        state.iters += 1
    return state.theta


def reference_nets(name: str):
    """The same N initial models as ``batched_run``, as plain nn.Modules."""
    model = get_model(name)
    layout = Layout.of(model.factory())
    init = init_theta(layout, N, "caffe_xavier", torch.Generator().manual_seed(1))
    nets = []
    for i in range(N):
        net = model.factory()
        load_flat(net, layout, init[i])
        nets.append(net)
    return layout, init, nets


@pytest.mark.parametrize("name", ["lenet", "mlp"])
@pytest.mark.parametrize("impl", ["explicit", "vmap"])
def test_batched_step_matches_torch_optim_loop(name, impl):
    """Fixed lr: Caffe's v = m v + lr g; w -= v equals torch.optim.SGD's buf = m buf + g; w -= lr buf."""
    cfg = SGDConfig(lr_policy="fixed")
    data = batches(0)
    theta = batched_run(name, impl, cfg, data)

    layout, init, nets = reference_nets(name)
    for i, net in enumerate(nets):
        weights = [p for n, p in net.named_parameters() if not n.endswith("bias")]
        biases = [p for n, p in net.named_parameters() if n.endswith("bias")]
        opt = torch.optim.SGD([{"params": weights, "lr": cfg.lr},
                               {"params": biases, "lr": cfg.lr * cfg.bias_lr_mult}],
                              momentum=cfg.momentum, weight_decay=cfg.weight_decay)
        for x, y in data:
            opt.zero_grad()
            F.cross_entropy(net(x[i]), y[i]).backward()
            opt.step()
        for s in layout.specs:
            got, want = theta[i, s.start:s.stop], flatten(net)[s.start:s.stop]
            assert rel_err(got, want) <= 1e-5, (name, impl, i, s.name)
        # and the parameters really moved (the check is not vacuous)
        assert rel_err(init[i], flatten(net)) > 1e-4


@pytest.mark.parametrize("name", ["lenet", "mlp"])
def test_inv_policy_matches_per_node_caffe_loop(name):
    """The "inv" policy with each node's own iteration count, against a plain per-tensor loop."""
    cfg = SGDConfig()  # inv
    data = batches(2)
    theta = batched_run(name, "explicit", cfg, data)

    layout, init, nets = reference_nets(name)
    for i, net in enumerate(nets):
        vel = {n: torch.zeros_like(p) for n, p in net.named_parameters()}
        for it, (x, y) in enumerate(data):
            net.zero_grad()
            F.cross_entropy(net(x[i]), y[i]).backward()
            lr = 0.01 * (1 + 1e-4 * it) ** -0.75
            with torch.no_grad():
                for n, p in net.named_parameters():
                    mult = 2.0 if n.endswith("bias") else 1.0
                    vel[n] = 0.9 * vel[n] + lr * mult * (p.grad + 5e-4 * p)
                    p -= vel[n]
        assert rel_err(theta[i], flatten(net)) <= 1e-5


def test_node_lr_inv_values():
    lr = node_lr(SGDConfig(), torch.tensor([0, 10_000]))
    assert lr[0].item() == pytest.approx(0.01)
    assert lr[1].item() == pytest.approx(0.01 * 2 ** -0.75, rel=1e-6)


def test_lenet_is_the_caffe_model():
    layout = Layout.of(get_model("lenet").factory())
    assert layout.size == 431_080
    assert layout.layers == ("conv1", "conv2", "ip1", "ip2")


def test_init_caffe_xavier_variance_and_shared_option():
    layout = Layout.of(get_model("lenet").factory())
    theta = init_theta(layout, 4, "caffe_xavier", torch.Generator().manual_seed(0))
    for s, fan in zip(layout.weights, (25, 500, 800, 500)):
        seg = theta[:, s.start:s.stop]
        assert seg.abs().max() <= (3 / fan) ** 0.5
        assert seg.var().item() == pytest.approx(1 / fan, rel=0.05)
    for s in layout.specs:
        if s.is_bias:
            assert theta[:, s.start:s.stop].abs().max() == 0
    assert not torch.equal(theta[0], theta[1])
    shared = init_theta(layout, 4, "caffe_xavier", torch.Generator().manual_seed(0), shared=True)
    assert torch.equal(shared[0], shared[3])
    glorot = init_theta(layout, 2, "glorot", torch.Generator().manual_seed(0))
    s = layout.weights[2]  # ip1: 800 -> 500
    assert glorot[:, s.start:s.stop].var().item() == pytest.approx(2 / 1300, rel=0.05)
    with pytest.raises(ValueError, match="model.init"):
        init_theta(layout, 2, "he", torch.Generator())


def test_to_modules_unstacks_every_node():
    from vecgossip.stack import to_modules
    layout, init, nets = reference_nets("mlp")
    mods = to_modules(new_state(layout, init), get_model("mlp").factory)
    assert len(mods) == N
    for i, m in enumerate(mods):
        assert torch.equal(flatten(m), init[i])
