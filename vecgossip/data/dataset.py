"""A data set held as uint8 tensors on the device (:class:`Dataset`), where its files are
(``data_root``, ``$VECGOSSIP_DATA``, ``./data``), and the evaluation sets of paper 1."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

Tensor = torch.Tensor


DATA_ENV = "VECGOSSIP_DATA"



EVAL_SETS = ("fixed100", "full", "local")



PIXEL_SCALE = 1.0 / 256.0  # Caffe's MNIST example scales by 0.00390625



NUM_CLASSES = 10



def resolve_root(root: str | os.PathLike | None) -> Path:
    """The data root: the explicit option, else $VECGOSSIP_DATA, else ./data."""
    if root in (None, ""):
        root = os.environ.get(DATA_ENV) or "data"
    return Path(root).expanduser().resolve()



@dataclass
class LabelIndex:
    """Images grouped by label: ``order`` (M,) indices sorted by label; ``start``/``count`` (C,)."""

    order: Tensor
    start: Tensor
    count: Tensor

    @staticmethod
    def of(labels: Tensor, num_classes: int | None = None) -> "LabelIndex":
        order = torch.argsort(labels, stable=True)
        c = num_classes if num_classes is not None else max(NUM_CLASSES, int(labels.max()) + 1)
        count = torch.bincount(labels, minlength=c)
        start = torch.cumsum(count, 0) - count
        return LabelIndex(order, start, count)



@dataclass
class Dataset:
    """Images as uint8 (M, C, H, W) and labels (M,) on the device, plus the label index.

    ``batch`` turns gathered images into floats: x * scale (MNIST: Caffe's 1/256), or per channel
    x * scale_c + shift_c when ``shift`` is given ((x/255 - mean_c) / std_c for CIFAR: one fused
    multiply-add). ``augment`` pads by that many pixels, crops back and flips (CIFAR's random crop
    32 / padding 4 / horizontal flip) in ``train_batch``, on whole batched tensors (augment.py).
    """

    images: Tensor
    labels: Tensor
    index: LabelIndex
    scale: float | Tensor = PIXEL_SCALE
    shift: Tensor | None = None
    augment: int = 0
    name: str = "mnist"
    source: str = "MNIST"   # how numbers measured on it are labelled, e.g. "CIFAR-10 (JPEG copy)"
    dtype: torch.dtype = torch.float32   # of the batches handed to the models
    # text (data=shakespeare): ``images`` are (M, T) uint8 character windows handed to the models
    # as int64 indices, never scaled; ``groups`` (m + 1,) the data's own owners: sample rows
    # groups[i]:groups[i+1] are role i's (a natural partition; None: the data has none)
    tokens: bool = False
    groups: "np.ndarray | None" = None

    @property
    def num_classes(self) -> int:
        return int(self.index.count.numel())

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.images.shape[1:])

    def normalise(self, images: Tensor) -> Tensor:
        """uint8 (..., C, H, W) -> float (..., C, H, W) in ``dtype``; text: int64 indices."""
        if self.tokens:
            return images.long()
        x = images.to(self.dtype)
        if self.shift is None:
            return x.mul_(self.scale)
        c = self.images.shape[1]
        scale = self.scale.view(c, 1, 1) if isinstance(self.scale, Tensor) else self.scale
        return x.mul_(scale).add_(self.shift.view(c, 1, 1))

    def batch(self, idx: Tensor) -> tuple[Tensor, Tensor]:
        """Gather (..., C, H, W) float images and (...) labels, without augmentation."""
        return self.normalise(self.images[idx]), self.labels[idx]

    def train_batch(self, idx: Tensor, crops: Tensor | None) -> tuple[Tensor, Tensor]:
        """Like :meth:`batch`, with each image cropped/flipped by ``crops`` (..., 3) (augment.py)."""
        if crops is None:
            return self.batch(idx)
        from vecgossip.data.augment import crop_flip
        images = crop_flip(self.images[idx].flatten(0, -4), crops.reshape(-1, 3), self.augment)
        return self.normalise(images.view(*idx.shape, *self.shape)), self.labels[idx]

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> "Dataset":
        """On ``device``, its batches in ``dtype`` (default: as they are)."""
        dtype = dtype or self.dtype
        mv = (lambda t: t.to(device, dtype) if isinstance(t, Tensor) else t)
        return Dataset(self.images.to(device), self.labels.to(device),
                       LabelIndex(self.index.order.to(device), self.index.start.to(device),
                                  self.index.count.to(device)),
                       mv(self.scale), mv(self.shift), self.augment, self.name, self.source, dtype,
                       self.tokens, self.groups)



def eval_indices(labels: Tensor, kind: str, per_label: int = 10) -> Tensor:
    """Evaluation set: ``fixed100`` = the first ``per_label`` test images of each label, in test
    order (the reference simulator's 100 images; 10 per label of any data set); ``full`` = every
    test image."""
    if kind not in EVAL_SETS:
        raise ValueError(f"data.eval_set={kind!r} is unknown; allowed: {', '.join(EVAL_SETS)}")
    if kind == "full":
        return torch.arange(labels.numel(), device=labels.device)
    idx = [torch.nonzero(labels == c).flatten()[:per_label] for c in range(int(labels.max()) + 1)]
    return torch.cat(idx)
