"""ResNet-18, the CIFAR variant of paper 2's experiments (He et al.; the layout of the common CIFAR
ports: a 3x3 stride-1 stem and no initial max-pool), for any input (C, H, W) and class count.

Four stages of two BasicBlocks (64, 128, 256, 512 channels; stride 2 from the second stage, with a
1x1 projection shortcut where the shape changes), global average pool, one linear layer: 11.17 M
parameters on CIFAR-10. Normalisation after every convolution, ``norm=``:

- ``batch`` (default, as in the paper's code): BatchNorm2d (momentum 0.1, eps 1e-5). In the stacked
  engines every client keeps its own running mean and variance (stack.Layout's buffers, beside its
  parameters); a training forward normalises with the client's batch statistics and updates its
  running ones, an evaluation forward uses the running ones.
- ``group``: GroupNorm with 2 groups per layer (no running statistics: the model is a pure
  function of its parameters, the same in training and evaluation).
"""
from __future__ import annotations

import torch.nn.functional as F
from torch import nn

NORMS = ("batch", "group")
GROUPS = 2


def norm_layer(kind: str, channels: int) -> nn.Module:
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    if kind == "group":
        return nn.GroupNorm(GROUPS, channels)
    raise ValueError(f"model.norm={kind!r} is not available; allowed: {', '.join(NORMS)}")


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int, norm: str) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = norm_layer(norm, c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = norm_layer(norm, c_out)
        self.shortcut = nn.Sequential()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), norm_layer(norm, c_out))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    def __init__(self, in_shape: tuple[int, int, int] = (3, 32, 32), num_classes: int = 10,
                 norm: str = "batch") -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_shape[0], 64, 3, 1, 1, bias=False)
        self.bn1 = norm_layer(norm, 64)
        blocks, c = [], 64
        for c_out, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            blocks.append(nn.Sequential(BasicBlock(c, c_out, stride, norm), BasicBlock(c_out, c_out, 1, norm)))
            c = c_out
        self.layer1, self.layer2, self.layer3, self.layer4 = blocks
        self.linear = nn.Linear(512, num_classes)

    def forward(self, x):  # (B, C, H, W) -> (B, classes)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        return self.linear(F.adaptive_avg_pool2d(out, 1).flatten(1))
