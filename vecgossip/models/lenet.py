"""Caffe LeNet-5 (Caffe's MNIST example; paper section III-A, REFERENCE.md).

conv1 20x5x5 -> maxpool 2 -> conv2 50x5x5 -> maxpool 2 -> ip1 800->500 + ReLU -> ip2 500->10.
No activation after the conv layers (that is the Caffe model). 431,080 parameters.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .layers import Sink, linear

Tensor = torch.Tensor


class LeNetCaffe(nn.Module):
    """The plain single-node model (layout source and loop twin in tests)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 20, 5)
        self.conv2 = nn.Conv2d(20, 50, 5)
        self.ip1 = nn.Linear(800, 500)
        self.ip2 = nn.Linear(500, 10)

    def forward(self, x: Tensor) -> Tensor:  # (B, 1, 28, 28) -> (B, 10)
        x = F.max_pool2d(self.conv1(x), 2)
        x = F.max_pool2d(self.conv2(x), 2)
        x = F.relu(self.ip1(x.flatten(1)))
        return self.ip2(x)


def batched_forward(p: dict[str, Tensor], x: Tensor, sink: Sink | None = None) -> Tensor:
    """All nodes at once: x (N, B, 1, 28, 28) with per-node weights p[name] (N, ...) -> (N, B, 10).

    The convolutions fold the node axis into channels and run one grouped convolution
    (groups = N, channels-last); the linear layers, 94% of the parameters, are one baddbmm each,
    and with ``sink`` their weight gradients stay factored (models/layers.py).
    """
    n, b = x.shape[:2]
    cl = torch.channels_last  # measured: mkldnn grouped conv and max-pool run ~1.4x faster in NHWC
    h = x.transpose(0, 1).reshape(b, n, 28, 28).contiguous(memory_format=cl)   # (B, N, 28, 28)
    w1 = p["conv1.weight"].reshape(n * 20, 1, 5, 5).contiguous(memory_format=cl)
    h = F.max_pool2d(F.conv2d(h, w1, p["conv1.bias"].reshape(-1), groups=n), 2)  # (B, N*20, 12, 12)
    w2 = p["conv2.weight"].reshape(n * 50, 20, 5, 5).contiguous(memory_format=cl)
    h = F.max_pool2d(F.conv2d(h, w2, p["conv2.bias"].reshape(-1), groups=n), 2)  # (B, N*50, 4, 4)
    h = h.reshape(b, n, 800).transpose(0, 1)                                   # (N, B, 800)
    h = linear(p, "ip1", h, sink).relu_()                                      # (N, B, 500)
    return linear(p, "ip2", h, sink)                                           # (N, B, 10)
