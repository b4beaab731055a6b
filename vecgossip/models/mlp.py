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
    h = x.flatten(2).transpose(1, 2)                                            # (N, 784, B)
    # out^T = W @ h^T keeps the weight gradient in W's own layout (no transposed copy)
    h = torch.baddbmm(p["fc1.bias"].unsqueeze(2), p["fc1.weight"], h).relu_()  # (N, hidden, B)
    return torch.baddbmm(p["fc2.bias"].unsqueeze(2), p["fc2.weight"], h).transpose(1, 2)  # (N, B, 10)
