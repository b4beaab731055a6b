"""A small MLP (C*H*W -> hidden -> classes) for fast tests and quick sweeps."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from vecgossip.core.layers import Sink, linear

Tensor = torch.Tensor


class MLP(nn.Module):
    def __init__(self, in_shape: tuple[int, int, int] = (1, 28, 28), num_classes: int = 10,
                 hidden: int = 64) -> None:
        super().__init__()
        self.fc1 = nn.Linear(math.prod(in_shape), hidden)
        self.fc2 = nn.Linear(hidden, num_classes)

    def forward(self, x: Tensor) -> Tensor:  # (B, C, H, W) -> (B, classes)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def batched_forward(p: dict[str, Tensor], x: Tensor, sink: Sink | None = None, train: bool = True) -> Tensor:
    """x (N, B, C, H, W) -> (N, B, classes), one baddbmm per layer (weight gradients factored into
    ``sink`` when given: models/layers.py)."""
    h = linear(p, "fc1", x.flatten(2), sink).relu_()                           # (N, B, hidden)
    return linear(p, "fc2", h, sink)                                           # (N, B, classes)
