"""Batched training step + Caffe SGD vs a per-node loop of plain nn.Modules (same seeds, batches).

Several steps are compared in float64 (1e-10); float32 one step at a time from the same models
(1e-5), where a max-pool/ReLU decision flipped by rounding cannot be amplified by later steps
(test_rounds.py, CASES)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from reference.gossip import caffe_step
from vecgossip.models import get_model, make_forward
from vecgossip.core.optim import SGDConfig, loss_and_grad, node_lr, sgd_update
from vecgossip.core.state import Layout, flatten, init_theta, load_flat, new_state

N, B, STEPS = 3, 8, 5


def batches(seed: int, dtype: torch.dtype = torch.float32, steps: int = STEPS):
    g = torch.Generator().manual_seed(seed)
    return [(torch.rand(N, B, 1, 28, 28, generator=g).to(dtype), torch.randint(0, 10, (N, B), generator=g))
            for _ in range(steps)]


PRECISIONS = [(torch.float64, STEPS, 1e-10), (torch.float32, 1, 1e-5)]   # (dtype, steps, tolerance)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def batched_run(name: str, impl: str, cfg: SGDConfig, data, factored: bool = True) -> torch.Tensor:
    model = get_model(name)
    layout = Layout.of(model.factory())
    init = init_theta(layout, N, "caffe_xavier", torch.Generator().manual_seed(1)).to(data[0][0].dtype)
    state = new_state(layout, init)
    fwd = make_forward(name, impl)
    for x, y in data:
        _, grads = loss_and_grad(fwd, layout, state.theta, x, y, factored=factored)
        sgd_update(state.theta, state.momentum, grads, state.iters, layout, cfg)
        state.iters += 1
    return state.theta


def reference_nets(name: str, dtype: torch.dtype = torch.float32):
    """The same N initial models as ``batched_run``, as plain nn.Modules in ``dtype``."""
    model = get_model(name)
    layout = Layout.of(model.factory())
    init = init_theta(layout, N, "caffe_xavier", torch.Generator().manual_seed(1)).to(dtype)
    nets = []
    for i in range(N):
        net = model.factory().to(dtype)
        load_flat(net, layout, init[i])
        nets.append(net)
    return layout, init, nets


@pytest.mark.parametrize("dtype,steps,tol", PRECISIONS, ids=["float64", "float32"])
@pytest.mark.parametrize("name", ["lenet", "mlp"])
@pytest.mark.parametrize("impl,factored", [("explicit", True), ("explicit", False), ("vmap", False)])
def test_batched_step_matches_torch_optim_loop(name, impl, factored, dtype, steps, tol):
    """Fixed lr: Caffe's v = m v + lr g; w -= v equals torch.optim.SGD's buf = m buf + g; w -= lr buf.
    Factored: linear weight gradients folded into the momentum by GEMM (LeNet's ip1 node by node
    through the fused kernel, ip2 and the MLP batched); not factored: dense gradients."""
    cfg = SGDConfig(lr_policy="fixed")
    data = batches(0, dtype, steps)
    theta = batched_run(name, impl, cfg, data, factored)

    layout, init, nets = reference_nets(name, dtype)
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
            assert rel_err(got, want) <= tol, (name, impl, i, s.name)
        # and the parameters really moved (the check is not vacuous)
        assert rel_err(init[i], flatten(net)) > 1e-4


@pytest.mark.parametrize("dtype,steps,tol", PRECISIONS, ids=["float64", "float32"])
@pytest.mark.parametrize("name", ["lenet", "mlp"])
def test_inv_policy_matches_per_node_caffe_loop(name, dtype, steps, tol):
    """The "inv" policy with each node's own iteration count, against a plain per-tensor loop."""
    cfg = SGDConfig()  # inv
    data = batches(2, dtype, steps)
    theta = batched_run(name, "explicit", cfg, data)

    layout, init, nets = reference_nets(name, dtype)
    for i, net in enumerate(nets):
        vel = {n: torch.zeros_like(p) for n, p in net.named_parameters()}
        for it, (x, y) in enumerate(data):
            net.zero_grad()
            F.cross_entropy(net(x[i]), y[i]).backward()
            caffe_step(net, vel, it)
        assert rel_err(theta[i], flatten(net)) <= tol


@pytest.mark.parametrize("per_node,fused", [(True, True), (True, False), (False, True)])
def test_factored_update_with_per_node_lr_matches_caffe_loop(monkeypatch, per_node, fused):
    """Nodes at different iteration counts (different lr) in one call; both CPU branches of the
    factored update, against Caffe's rule written out per node on the dense autograd gradient."""
    from vecgossip.core import optim
    monkeypatch.setattr(optim, "PER_NODE_BYTES", 0 if per_node else 1 << 40)
    if not fused:
        monkeypatch.setattr(optim, "_FUSED_SGD", None)
    cfg = SGDConfig()  # inv, momentum 0.9, wd 5e-4, bias lr x2
    layout, init, nets = reference_nets("mlp")
    state = new_state(layout, init.clone())
    state.iters[:] = torch.tensor([0, 4000, 30000])
    state.momentum.normal_(0, 1e-3, generator=torch.Generator().manual_seed(3))
    mom0 = state.momentum.clone()
    x, y = batches(4)[0]
    _, grads = loss_and_grad(make_forward("mlp"), layout, state.theta, x, y)
    assert any(isinstance(g, optim.Factored) for g in grads)
    sgd_update(state.theta, state.momentum, grads, state.iters, layout, cfg)
    for i, net in enumerate(nets):
        F.cross_entropy(net(x[i]), y[i]).backward()
        lr = 0.01 * (1 + 1e-4 * float(state.iters[i])) ** -0.75
        for s, (n, p) in zip(layout.specs, net.named_parameters()):
            mult = 2.0 if n.endswith("bias") else 1.0
            v = 0.9 * mom0[i, s.start:s.stop] + lr * mult * (p.grad.flatten() + 5e-4 * p.detach().flatten())
            assert rel_err(state.momentum[i, s.start:s.stop], v) <= 1e-5, (i, n)
            assert rel_err(state.theta[i, s.start:s.stop], p.detach().flatten() - v) <= 1e-6, (i, n)


def test_linear_layer_gradients_match_per_node_autograd():
    """models/layers.linear: output, input, bias and weight gradients (factored and dense) vs
    F.linear node by node."""
    from vecgossip.core.layers import Factored, linear
    g = torch.Generator().manual_seed(5)
    w, b, h, up = (torch.randn(*s, generator=g) for s in ((3, 7, 11), (3, 7), (3, 4, 11), (3, 4, 7)))
    want = []
    for i in range(3):
        wi, bi, hi = (t[i].clone().requires_grad_() for t in (w, b, h))
        (F.linear(hi, wi, bi) * up[i]).sum().backward()
        want.append((F.linear(hi, wi, bi).detach(), wi.grad, bi.grad, hi.grad))
    for sink in ({}, None):
        p = {"l.weight": w.clone().requires_grad_(), "l.bias": b.clone().requires_grad_()}
        hh = h.clone().requires_grad_()
        out = linear(p, "l", hh, sink)
        (out * up).sum().backward()
        dw = sink["l.weight"].dense() if sink is not None else p["l.weight"].grad
        if sink is not None:
            assert isinstance(sink["l.weight"], Factored) and p["l.weight"].grad is None
        for i, (o, gw, gb, gh) in enumerate(want):
            torch.testing.assert_close(out[i].detach(), o)
            torch.testing.assert_close(dw[i], gw)
            torch.testing.assert_close(p["l.bias"].grad[i], gb)
            torch.testing.assert_close(hh.grad[i], gh)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-4)])
def test_cnn_training_and_evaluation_forwards_match_per_client_modules(dtype, tol):
    """The CNN's two batched forwards (training on the CPU: per-client convolutions; evaluation and
    GPU training: one grouped convolution per layer) and the loss gradients of every parameter
    (factored and dense) vs per-client nn.Modules and autograd, for a chunk of 3 and a lone client
    (the pair path); the grouped conv blocks' gradients as well."""
    from vecgossip.core.layers import Factored
    model = get_model("cnn")
    layout = Layout.of(model.factory((3, 20, 20), 10))
    theta = init_theta(layout, 3, "torch", torch.Generator().manual_seed(2)).to(dtype)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 5, 3, 20, 20, generator=g).to(dtype)
    y = torch.randint(0, 10, (3, 5), generator=g)
    fwd = make_forward("cnn", "explicit")
    with torch.no_grad():
        train_logits = fwd(layout.views(theta), x)
        eval_logits = fwd(layout.views(theta), x, train=False)
    for rows in (slice(0, 3), slice(2, 3)):
        for factored in (True, False):
            loss, grads = loss_and_grad(fwd, layout, theta[rows].clone(), x[rows], y[rows], factored=factored)
            for j, i in enumerate(range(3)[rows]):
                net = model.factory((3, 20, 20), 10).to(dtype)
                load_flat(net, layout, theta[i])
                out = net(x[i])
                assert rel_err(train_logits[i], out.detach()) <= tol
                assert rel_err(eval_logits[i], out.detach()) <= tol
                ce = F.cross_entropy(out, y[i])
                ce.backward()
                assert abs(float(loss[j] - ce.detach())) <= tol * float(ce.detach())
                for grad, (name, q) in zip(grads, net.named_parameters()):
                    got = grad.dense()[j] if isinstance(grad, Factored) else grad[j]
                    assert rel_err(got, q.grad) <= tol, (rows, factored, i, name)
    # the grouped conv blocks (training on a GPU): features and their gradients vs the modules
    from vecgossip.models.cnn import grouped_features
    leaf = theta.clone().requires_grad_(True)
    feats = grouped_features(layout.views(leaf), x, 3)                       # (3, 5, 64*2*2)
    up = torch.randn(feats.shape, generator=g).to(dtype)
    grads = torch.autograd.grad((feats * up).sum(), leaf)[0]
    for i in range(3):
        net = model.factory((3, 20, 20), 10).to(dtype)
        load_flat(net, layout, theta[i])
        h = F.max_pool2d(F.relu(net.conv2(F.max_pool2d(F.relu(net.conv1(x[i])), 2))), 2).flatten(1)
        assert rel_err(feats[i].detach(), h.detach()) <= tol
        (h * up[i]).sum().backward()
        for name in ("conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias"):
            spec = next(s for s in layout.specs if s.name == name)
            want = dict(net.named_parameters())[name].grad.flatten()
            assert rel_err(grads[i, spec.start:spec.stop], want) <= tol, (i, name)


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
    from vecgossip.core.state import to_modules
    layout, init, nets = reference_nets("mlp")
    mods = to_modules(new_state(layout, init), get_model("mlp").factory)
    assert len(mods) == N
    for i, m in enumerate(mods):
        assert torch.equal(flatten(m), init[i])
