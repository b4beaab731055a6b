"""Image data sets held as uint8 tensors on the device, and paper 1's per-node batch samplers
(paper section III-A, Fig. 1; docs: Data). Loading lives in ``datasets.py`` (the registry), fixed client partitions
for the round engine in ``partition.py``.

Paper 1's nodes do not own disjoint shards: every training step draws its B samples with
replacement from the whole training set. IID: a label uniformly, then a random image of that label.
Non-IID: each node draws p_node ~ Dirichlet(alpha * 1_C) once; each sample picks its label from
p_node, then a random image of that label (paper section III-A, Fig. 1). One call samples for all
training nodes. That is the docs' (Data page) reading (``data.sampler=label_mix``, the default); two
other readings of "Dirichlet alpha = 0.5" are options, to test which one the paper ran (issue 28):
``prior_mix`` (p_node ~ Dirichlet(alpha * q) with q the uniform prior 1/C, Hsu, Qi and Brown,
arXiv 1909.06335, section 3: alpha = 0.5 is then Dirichlet(0.05 * 1_C), far more skewed) and
``shards`` (disjoint shards: each class's images split over the nodes by shares ~ Dirichlet(alpha
* 1_N), partition.dirichlet, the common FL partition; each node samples with replacement from its
own shard only). (Per-class shares over the nodes used as label mixes without disjoint shards are
no separate reading: normalised per node they follow Dirichlet(alpha * 1_C) as N grows.)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from vecgossip.data.dataset import NUM_CLASSES, Dataset, LabelIndex

Tensor = torch.Tensor

SAMPLERS = ("label_mix", "prior_mix", "shards")   # how alpha makes the tick engine's data non-IID (issue 28)


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
