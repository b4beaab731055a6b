"""MNIST held as tensors on the device, and per-node batch samplers (REFERENCE.md, "Data").

Nodes do not own disjoint shards: every training step draws its B samples with replacement from
the whole training set. IID: a label uniformly, then a random image of that label. Non-IID: each
node draws p_node ~ Dirichlet(alpha * 1_10) once; each sample picks its label from p_node, then a
random image of that label (paper section III-A, Fig. 1). One call samples for all training nodes.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

Tensor = torch.Tensor

DATA_ENV = "VECGOSSIP_DATA"
EVAL_SETS = ("fixed100", "full")
PIXEL_SCALE = 1.0 / 256.0  # Caffe's MNIST example scales by 0.00390625
NUM_CLASSES = 10


def resolve_root(root: str | os.PathLike | None) -> Path:
    """The data root: the explicit option, else $VECGOSSIP_DATA, else ./data."""
    if root in (None, ""):
        root = os.environ.get(DATA_ENV) or "data"
    return Path(root).expanduser().resolve()


@dataclass
class LabelIndex:
    """Images grouped by label: ``order`` (M,) indices sorted by label; ``start``/``count`` (10,)."""

    order: Tensor
    start: Tensor
    count: Tensor

    @staticmethod
    def of(labels: Tensor) -> "LabelIndex":
        order = torch.argsort(labels, stable=True)
        count = torch.bincount(labels, minlength=NUM_CLASSES)
        start = torch.cumsum(count, 0) - count
        return LabelIndex(order, start, count)


@dataclass
class Dataset:
    """Images as uint8 (M, 1, 28, 28) and labels (M,) on the device, plus the label index."""

    images: Tensor
    labels: Tensor
    index: LabelIndex

    def batch(self, idx: Tensor) -> tuple[Tensor, Tensor]:
        """Gather (..., 1, 28, 28) float images scaled by 1/256 and (...) labels."""
        return self.images[idx].to(torch.float32).mul_(PIXEL_SCALE), self.labels[idx]

    def to(self, device: torch.device | str) -> "Dataset":
        return Dataset(self.images.to(device), self.labels.to(device),
                       LabelIndex(self.index.order.to(device), self.index.start.to(device),
                                  self.index.count.to(device)))


def load_mnist(root: str | os.PathLike | None, train: bool, download: bool = False,
               device: torch.device | str = "cpu") -> Dataset:
    """Load MNIST through torchvision's parser from ``root``/MNIST/raw."""
    from torchvision.datasets import MNIST

    path = resolve_root(root)
    try:
        ds = MNIST(str(path), train=train, download=download)
    except RuntimeError as err:
        raise FileNotFoundError(
            f"MNIST not found under data.root={str(path)!r} (expected {path}/MNIST/raw/"
            "train-images-idx3-ubyte and the other three IDX files). Put the files there, point "
            f"data.root=... or ${DATA_ENV} at a folder that holds MNIST/raw, or pass "
            "data.download=true on a machine with internet.") from err
    images = ds.data.unsqueeze(1).contiguous()                                  # (M, 1, 28, 28) uint8
    labels = ds.targets.to(torch.int64)
    return Dataset(images, labels, LabelIndex.of(labels)).to(device)


def eval_indices(labels: Tensor, kind: str, per_label: int = 10) -> Tensor:
    """Evaluation set: ``fixed100`` = the first ``per_label`` test images of each label, in test
    order (the reference simulator's 100 images); ``full`` = every test image."""
    if kind not in EVAL_SETS:
        raise ValueError(f"data.eval_set={kind!r} is unknown; allowed: {', '.join(EVAL_SETS)}")
    if kind == "full":
        return torch.arange(labels.numel(), device=labels.device)
    idx = [torch.nonzero(labels == c).flatten()[:per_label] for c in range(NUM_CLASSES)]
    return torch.cat(idx)


def dirichlet_label_probs(n: int, alpha: float | None, rng: np.random.Generator) -> Tensor | None:
    """(N, 10) per-node label distributions p_node ~ Dirichlet(alpha * 1), or None for IID."""
    if alpha is None:
        return None
    if alpha <= 0:
        raise ValueError(f"data.alpha must be > 0 or null (IID), got {alpha}")
    return torch.from_numpy(rng.dirichlet(np.full(NUM_CLASSES, float(alpha)), size=n)).to(torch.float32)


def sample_labels(probs: Tensor | None, m: int, batch: int, generator: torch.Generator,
                  device: torch.device | str) -> Tensor:
    """(M, B) labels: uniform over the 10 labels (IID) or drawn from each row of probs (M, 10)."""
    if probs is None:
        return torch.randint(0, NUM_CLASSES, (m, batch), generator=generator, device=device)
    return torch.multinomial(probs, batch, replacement=True, generator=generator)


def sample_indices(index: LabelIndex, labels: Tensor, generator: torch.Generator) -> Tensor:
    """(M, B) image indices: for each label, an image of that label uniformly at random."""
    u = torch.rand(labels.shape, generator=generator, device=labels.device)
    count = index.count[labels]
    pos = torch.minimum((u * count).to(torch.int64), count - 1)
    return index.order[index.start[labels] + pos]



def sample_node_batches(data: Dataset, probs: Tensor | None, m: int, batch: int,
                        generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """One training batch for each of M nodes: images (M, B, 1, 28, 28), labels (M, B).

    ``probs`` is None for IID or the (M, 10) label distributions of the M training nodes.
    """
    labels = sample_labels(probs, m, batch, generator, data.labels.device)
    return data.batch(sample_indices(data.index, labels, generator))
