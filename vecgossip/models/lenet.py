"""Caffe LeNet-5 (Caffe's MNIST example; paper section III-A, footnote 2).

conv1 20x5x5 -> maxpool 2 -> conv2 50x5x5 -> maxpool 2 -> ip1 -> 500 + ReLU -> ip2 500 -> classes.
No activation after the conv layers (that is the Caffe model). 431,080 parameters on MNIST; any
input (C, H, W) works (CIFAR: 3 x 32 x 32 gives 1250 features into ip1).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vecgossip.core.layers import SharedImages, Sink, conv_features, first_conv, grouped_conv, linear, pooled_side

Tensor = torch.Tensor


class LeNetCaffe(nn.Module):
    """The plain single-node model (layout source and loop twin in tests)."""

    def __init__(self, in_shape: tuple[int, int, int] = (1, 28, 28), num_classes: int = 10) -> None:
        super().__init__()
        c, h, w = in_shape
        self.conv1 = nn.Conv2d(c, 20, 5)
        self.conv2 = nn.Conv2d(20, 50, 5)
        self.ip1 = nn.Linear(50 * pooled_side(h) * pooled_side(w), 500)
        self.ip2 = nn.Linear(500, num_classes)

    def forward(self, x: Tensor) -> Tensor:  # (B, C, H, W) -> (B, classes)
        x = F.max_pool2d(self.conv1(x), 2)
        x = F.max_pool2d(self.conv2(x), 2)
        x = F.relu(self.ip1(x.flatten(1)))
        return self.ip2(x)


def batched_forward(p: dict[str, Tensor], x: Tensor | SharedImages, sink: Sink | None = None,
                    train: bool = True) -> Tensor:
    """All nodes at once: x (N, B, C, H, W) with per-node weights p[name] (N, ...) -> (N, B, classes).

    The convolutions fold the node axis into channels and run one grouped convolution
    (groups = N, channels-last); the linear layers, 94% of the parameters, are one baddbmm each,
    and with ``sink`` their weight gradients stay factored (models/layers.py). x may be
    :class:`SharedImages` (one evaluation set for every node: conv1 is then one GEMM, layers.first_conv).
    """
    n = p["conv1.weight"].shape[0]
    h = F.max_pool2d(first_conv(p, "conv1", x, n, sink), 2)                         # (B, N*20, ., .)
    h = F.max_pool2d(grouped_conv(p, "conv2", h, n, sink), 2)                       # (B, N*50, ., .)
    h = linear(p, "ip1", conv_features(h, n), sink).relu_()                    # (N, B, 500)
    return linear(p, "ip2", h, sink)                                           # (N, B, classes)


batched_forward.shared_kernel = 5   # conv1's side: metrics.evaluate may pass SharedImages (layers.first_conv)
