"""VGG-11, the CIFAR variant of paper 2's experiments (Simonyan & Zisserman's configuration "A":
64, M, 128, M, 256, 256, M, 512, 512, M, 512, 512, M; 3x3 convolutions with padding 1, each
followed by normalisation and ReLU), then global average pooling and one linear layer (the common
CIFAR ports' classifier): 9.23 M parameters on CIFAR-10. Any input (C, H, W) with H, W >= 1 after
the pools (the average pool makes the classifier independent of the input size).

Normalisation as in models/resnet.py: ``norm="batch"`` (BatchNorm2d, per-client running statistics
in the stacked engines; the default) or ``"group"`` (GroupNorm, 2 groups).
"""
from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from vecgossip.models.resnet import norm_layer

CONFIG_A = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


class VGG11(nn.Module):
    def __init__(self, in_shape: tuple[int, int, int] = (3, 32, 32), num_classes: int = 10,
                 norm: str = "batch") -> None:
        super().__init__()
        layers, c = [], in_shape[0]
        for v in CONFIG_A:
            if v == "M":
                layers.append(nn.MaxPool2d(2, ceil_mode=True))
            else:
                layers += [nn.Conv2d(c, v, 3, padding=1), norm_layer(norm, v), nn.ReLU()]
                c = v
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(512, num_classes)

    def forward(self, x):  # (B, C, H, W) -> (B, classes)
        return self.classifier(F.adaptive_avg_pool2d(self.features(x), 1).flatten(1))
