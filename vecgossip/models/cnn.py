"""The CNN of McMahan et al.'s FedAvg paper, the CPU workhorse of the round engine (paper 2).

conv1 5x5 -> 32, ReLU, maxpool 2 -> conv2 5x5 -> 64, ReLU, maxpool 2 -> fc1 -> 512, ReLU ->
fc2 -> classes. Valid (unpadded) convolutions, as in the common CIFAR ports of that model: on
CIFAR-10 (3 x 32 x 32) 1600 features reach fc1 and the model has 878,538 parameters; any input
(C, H, W) with H, W >= 16 works.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vecgossip.core.device import gpu_path
from vecgossip.core.layers import (SharedImages, Sink, client_conv, conv_features, first_conv, grouped_conv,
                                   linear, pooled_side)

Tensor = torch.Tensor


class CNN(nn.Module):
    """The plain single-client model (layout source and loop twin in tests)."""

    def __init__(self, in_shape: tuple[int, int, int] = (3, 32, 32), num_classes: int = 10) -> None:
        super().__init__()
        c, h, w = in_shape
        self.conv1 = nn.Conv2d(c, 32, 5)
        self.conv2 = nn.Conv2d(32, 64, 5)
        self.fc1 = nn.Linear(64 * pooled_side(h) * pooled_side(w), 512)
        self.fc2 = nn.Linear(512, num_classes)

    def forward(self, x: Tensor) -> Tensor:  # (B, C, H, W) -> (B, classes)
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def batched_forward(p: dict[str, Tensor], x: Tensor | SharedImages, sink: Sink | None = None,
                    train: bool = True) -> Tensor:
    """x (N, B, C, H, W) -> (N, B, classes): the conv blocks, then one baddbmm per linear layer
    over all clients (weight gradients factored into ``sink`` when given).

    Training on the CPU runs each client's conv blocks as its own channels-last convolutions
    (:func:`client_features`); evaluation (and training on a GPU) folds the clients into one
    grouped convolution per layer (:func:`grouped_features`), and x
    may then be :class:`SharedImages` (one evaluation set for every client: conv1 is one GEMM,
    layers.first_conv). Per client is the faster training path on the CPU (benchmarks/conv_groups.py;
    benchmarks/RESULTS.md, "The same round on a 2-core AMD EPYC").

    ReLU is applied after the max-pool: relu(maxpool(h)) = maxpool(relu(h)) exactly, values and
    gradients alike (ReLU is monotone, and the gradient of a window whose max is <= 0 is 0 either
    way), on a quarter of the elements."""
    n = p["conv1.weight"].shape[0]
    if train and not isinstance(x, SharedImages) and not gpu_path(x):
        h = torch.stack([client_features(p, x[i], i, sink) for i in range(n)])        # (N, B, 64*5*5)
    else:
        h = grouped_features(p, x, n, sink)                                         # (N, B, 64*5*5)
    h = linear(p, "fc1", h, sink).relu_()                                      # (N, B, 512)
    return linear(p, "fc2", h, sink)                                           # (N, B, classes)


def grouped_features(p: dict[str, Tensor], x: Tensor | SharedImages, n: int, sink: Sink | None = None) -> Tensor:
    """The conv blocks of all n clients as grouped convolutions (groups = n): x (N, B, C, H, W) or
    SharedImages -> (N, B, 64*H''*W'') in nn.Module order. Evaluation everywhere, and training on
    a GPU, where one grouped call per layer replaces n launches (the CPU measurement above does
    not carry over)."""
    h = F.max_pool2d(first_conv(p, "conv1", x, n, sink), 2).relu_()                   # (B, N*32, ., .)
    h = F.max_pool2d(grouped_conv(p, "conv2", h, n, sink), 2).relu_()                 # (B, N*64, ., .)
    return conv_features(h, n)


def client_features(p: dict[str, Tensor], x: Tensor, i: int, sink: Sink | None = None) -> Tensor:
    """Client i's two conv blocks on its images x (B, C, H, W) -> (B, 64*H''*W'') in nn.Module
    order: the plain per-client convolutions (layers.client_conv), as the per-client loop runs them."""
    h = F.max_pool2d(client_conv(p, "conv1", x.contiguous(memory_format=torch.channels_last), i, sink), 2).relu_()
    return F.max_pool2d(client_conv(p, "conv2", h, i, sink), 2).relu_().flatten(1)


batched_forward.shared_kernel = 5   # conv1's side: metrics.evaluate may pass SharedImages (layers.first_conv)
