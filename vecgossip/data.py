"""Image data sets held as uint8 tensors on the device, and paper 1's per-node batch samplers
(REFERENCE.md, "Data"). Loading lives in ``datasets.py`` (the registry), fixed client partitions
for the round engine in ``partition.py``.

Paper 1's nodes do not own disjoint shards: every training step draws its B samples with
replacement from the whole training set. IID: a label uniformly, then a random image of that label.
Non-IID: each node draws p_node ~ Dirichlet(alpha * 1_C) once; each sample picks its label from
p_node, then a random image of that label (paper section III-A, Fig. 1). One call samples for all
training nodes. That is REFERENCE.md's reading (``data.sampler=label_mix``, the default); two
other readings of "Dirichlet alpha = 0.5" are options, to test which one the paper ran (issue 28):
``prior_mix`` (p_node ~ Dirichlet(alpha * q) with q the uniform prior 1/C, Hsu, Qi and Brown,
arXiv 1909.06335, section 3: alpha = 0.5 is then Dirichlet(0.05 * 1_C), far more skewed) and
``shards`` (disjoint shards: each class's images split over the nodes by shares ~ Dirichlet(alpha
* 1_N), partition.dirichlet, the common FL partition; each node samples with replacement from its
own shard only). (Per-class shares over the nodes used as label mixes without disjoint shards are
no separate reading: normalised per node they follow Dirichlet(alpha * 1_C) as N grows.)
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

Tensor = torch.Tensor

DATA_ENV = "VECGOSSIP_DATA"
EVAL_SETS = ("fixed100", "full", "local")
SAMPLERS = ("label_mix", "prior_mix", "shards")   # how alpha makes the tick engine's data non-IID (issue 28)
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

    @property
    def num_classes(self) -> int:
        return int(self.index.count.numel())

    @property
    def shape(self) -> tuple[int, int, int]:
        return tuple(self.images.shape[1:])

    def normalise(self, images: Tensor) -> Tensor:
        """uint8 (..., C, H, W) -> float (..., C, H, W) in ``dtype``."""
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
        from .augment import crop_flip
        images = crop_flip(self.images[idx].flatten(0, -4), crops.reshape(-1, 3), self.augment)
        return self.normalise(images.view(*idx.shape, *self.shape)), self.labels[idx]

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> "Dataset":
        """On ``device``, its batches in ``dtype`` (default: as they are)."""
        dtype = dtype or self.dtype
        mv = (lambda t: t.to(device, dtype) if isinstance(t, Tensor) else t)
        return Dataset(self.images.to(device), self.labels.to(device),
                       LabelIndex(self.index.order.to(device), self.index.start.to(device),
                                  self.index.count.to(device)),
                       mv(self.scale), mv(self.shift), self.augment, self.name, self.source, dtype)


def load_mnist(root: str | os.PathLike | None, train: bool, download: bool = False,
               device: torch.device | str = "cpu") -> Dataset:
    """MNIST through torchvision's parser from ``root``/MNIST/raw (datasets.load("mnist", ...))."""
    from .datasets import load
    return load("mnist", root, train, download, device)


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


def dirichlet_label_probs(n: int, alpha: float | None, rng: np.random.Generator,
                          num_classes: int = NUM_CLASSES) -> Tensor | None:
    """(N, C) per-node label distributions p_node ~ Dirichlet(alpha * 1), or None for IID."""
    if alpha is None:
        return None
    if alpha <= 0:
        raise ValueError(f"data.alpha must be > 0 or null (IID), got {alpha}")
    return torch.from_numpy(rng.dirichlet(np.full(num_classes, float(alpha)), size=n)).to(torch.float32)


def prior_mix_probs(n: int, alpha: float | None, rng: np.random.Generator,
                    num_classes: int = NUM_CLASSES) -> Tensor | None:
    """(N, C) label mixes of ``data.sampler=prior_mix``: p_n ~ Dirichlet(alpha * q), q = 1_C / C
    the uniform class prior (Hsu et al. 2019's parametrisation). None for IID."""
    return dirichlet_label_probs(n, None if alpha is None else alpha / num_classes, rng, num_classes)


@dataclass
class Shards:
    """``data.sampler=shards``: node n owns training images ``order[start[n]:start[n]+count[n]]``
    (disjoint) and samples them uniformly with replacement."""

    order: Tensor   # (n_assigned,) training indices, node by node
    start: Tensor   # (N,)
    count: Tensor   # (N,)

    @staticmethod
    def of(owned: "np.ndarray", offsets: "np.ndarray", device: torch.device | str = "cpu") -> "Shards":
        off = torch.from_numpy(offsets.astype(np.int64))
        return Shards(torch.from_numpy(owned.astype(np.int64)).to(device), off[:-1].to(device),
                      (off[1:] - off[:-1]).to(device))

    def sample(self, nodes: Tensor, batch: int, generator: torch.Generator) -> Tensor:
        """(M, B) image indices: for each of the M ``nodes``, B images of its shard uniformly."""
        u = torch.rand((nodes.numel(), batch), generator=generator, device=self.order.device)
        count = self.count[nodes].unsqueeze(1)                                  # (M, 1)
        pos = torch.minimum((u * count).to(torch.int64), count - 1)
        return self.order[self.start[nodes].unsqueeze(1) + pos]


def sample_labels(probs: Tensor | None, m: int, batch: int, generator: torch.Generator,
                  device: torch.device | str, num_classes: int = NUM_CLASSES) -> Tensor:
    """(M, B) labels: uniform over the C labels (IID) or drawn from each row of probs (M, C)."""
    if probs is None:
        return torch.randint(0, num_classes, (m, batch), generator=generator, device=device)
    return torch.multinomial(probs, batch, replacement=True, generator=generator)


def sample_indices(index: LabelIndex, labels: Tensor, generator: torch.Generator) -> Tensor:
    """(M, B) image indices: for each label, an image of that label uniformly at random."""
    u = torch.rand(labels.shape, generator=generator, device=labels.device)
    count = index.count[labels]
    pos = torch.minimum((u * count).to(torch.int64), count - 1)
    return index.order[index.start[labels] + pos]


def sample_node_batches(data: Dataset, probs: Tensor | None, m: int, batch: int,
                        generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """One batch for each of M nodes: images (M, B, C, H, W), labels (M, B).

    ``probs`` is None for IID or the (M, C) label distributions of the M nodes.
    """
    labels = sample_labels(probs, m, batch, generator, data.labels.device, data.num_classes)
    return data.batch(sample_indices(data.index, labels, generator))
