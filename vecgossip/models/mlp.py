"""A small MLP (784 -> hidden -> 10) for fast tests and quick sweeps."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .layers import Sink, linear

Tensor = torch.Tensor


class MLP(nn.Module):
    def __init__(self, hidden: int = 64) -> None:
        super().__init__()
        self.fc1 = nn.Linear(784, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x: Tensor) -> Tensor:  # (B, 1, 28, 28) -> (B, 10)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def batched_forward(p: dict[str, Tensor], x: Tensor, sink: Sink | None = None) -> Tensor:
    """x (N, B, 1, 28, 28) -> (N, B, 10), one baddbmm per layer (weight gradients factored into
    ``sink`` when given: models/layers.py)."""
    h = linear(p, "fc1", x.flatten(2), sink).relu_()                           # (N, B, hidden)
    return linear(p, "fc2", h, sink)                                           # (N, B, 10)
