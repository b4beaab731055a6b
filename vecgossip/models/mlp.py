"""A small MLP (784 -> hidden -> 10) for fast tests and quick sweeps."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

Tensor = torch.Tensor


class MLP(nn.Module):
    def __init__(self, hidden: int = 64) -> None:
        super().__init__()
        self.fc1 = nn.Linear(784, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x: Tensor) -> Tensor:  # (B, 1, 28, 28) -> (B, 10)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def batched_forward(p: dict[str, Tensor], x: Tensor) -> Tensor:
    """x (N, B, 1, 28, 28) -> (N, B, 10), one baddbmm per layer."""
    h = x.flatten(2)                                                            # (N, B, 784)
    h = torch.baddbmm(p["fc1.bias"].unsqueeze(1), h, p["fc1.weight"].transpose(1, 2)).relu_()
    return torch.baddbmm(p["fc2.bias"].unsqueeze(1), h, p["fc2.weight"].transpose(1, 2))
