"""The per-message twins' training step on flat vectors (tests/reference/*_seconds.py): one node's
gradient at a flat model through a plain nn.Module, and Caffe SGD written out (momentum, weight
decay, the inv lr policy at the node's own step count, bias lr x ``bias_lr_mult``)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from vecgossip.core.state import load_flat
from vecgossip.models import build as build_model


def bias_multiplier(layout, o, dtype) -> torch.Tensor:
    """(P,) each parameter's lr multiplier: ``o.bias_lr_mult`` on biases, 1 elsewhere."""
    return torch.cat([torch.full((s.stop - s.start,), o.bias_lr_mult if s.is_bias else 1.0, dtype=dtype)
                      for s in layout.specs])


def mlp(data, dtype):
    """The plain MLP module the twins load flat models into."""
    return build_model("mlp", data.shape, data.num_classes).to(dtype)


def gradient(net, layout, x_flat, data, images) -> torch.Tensor:
    """The flat gradient of the loss of ``x_flat`` on the node's minibatch ``images`` (1, B)."""
    load_flat(net, layout, x_flat)
    x, y = data.train_batch(images, None)
    net.zero_grad()
    F.cross_entropy(net(x[0]), y[0]).backward()
    return torch.cat([q.grad.flatten() for q in net.parameters()])


def caffe_update(x, v, g, it: int, o, bias):
    """One Caffe SGD step: v <- m v + lr(it) bias (g + wd x); x <- x - v. Returns (x, v)."""
    lr = o.lr * (1 + o.gamma * it) ** (-o.power)
    v = o.momentum * v + lr * bias * (g + o.weight_decay * x)
    return x - v, v


class FlatNodes:
    """Every node's flat model (``xs``), velocity and step count (``iters``), started from the
    engine's initial models with its optimiser's settings, and :meth:`step`: one node's gradient
    on its minibatch and its Caffe SGD step (what every per-message twin's training does)."""

    def __init__(self, engine) -> None:
        self.layout, self.data, self.o = engine.layout, engine.train_data, engine.sgd
        self.xs = [engine.state.theta[i].clone() for i in range(engine.n)]
        self.vs = [torch.zeros_like(self.xs[0]) for _ in range(engine.n)]
        self.iters = [0] * engine.n
        self.bias = bias_multiplier(self.layout, self.o, self.xs[0].dtype)
        self.net = mlp(self.data, self.xs[0].dtype)

    def step(self, i: int, images) -> None:
        """Node i's training step at its model on ``images`` (1, B)."""
        g = gradient(self.net, self.layout, self.xs[i], self.data, images)
        self.xs[i], self.vs[i] = caffe_update(self.xs[i], self.vs[i], g, self.iters[i], self.o, self.bias)
        self.iters[i] += 1
