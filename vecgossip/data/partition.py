"""Fixed client partitions for the round engine (paper 2), their local test sets, and the batched
per-client minibatch sampler.

Partitions (every client holds a FIXED disjoint shard of the training set):
- ``iid``: a random permutation split into m near-equal shards;
- ``dirichlet``: per class, the class's samples are split over the m clients by proportions
  p_c ~ Dirichlet(alpha * 1_m) (Hsu et al. 2019; the NIID-Bench split; paper 2 uses alpha 0.3 and
  0.6); redrawn until every client holds at least ``min_samples``;
- ``pathological``: samples sorted by label (shuffled within a label) cut into m * c equal shards,
  c random shards per client (McMahan et al.'s split; at most c classes per client).

Local test sets follow each client's label mix: S images per client (S = ceil(test size / m) by
default, as in the DisPFL/DFedSAM code), the count of each class the largest-remainder rounding of
S x the client's training share of that class, drawn without replacement from the test images of
that class (clients' local test sets may overlap, as theirs do).

The sampler is DataLoader(shuffle=True, drop_last=False) per client, for all clients at once: each
client walks a fresh permutation of its shard in batches of B; the last batch of an epoch holds the
rest (padded to B with weight 0, so the loss is the mean over the real samples, exactly as the
DataLoader's short batch); then a new permutation starts. ``local_epochs=E`` runs E * ceil(n_i/B)
steps for client i, ``local_steps=K`` runs K batches of that same stream.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from vecgossip.core.device import host_copy, upload
from vecgossip.data.augment import draw_crops
from vecgossip.data.dataset import Dataset

Tensor = torch.Tensor
PARTITIONS = ("iid", "dirichlet", "pathological")


@dataclass(frozen=True)
class Partition:
    """Client i holds training samples ``members[offsets[i]:offsets[i+1]]`` (sorted)."""

    members: np.ndarray   # (n_assigned,) int64
    offsets: np.ndarray   # (m + 1,) int64

    @property
    def m(self) -> int:
        return self.offsets.size - 1

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    def client(self, i: int) -> np.ndarray:
        return self.members[self.offsets[i]:self.offsets[i + 1]]

    def owner(self) -> np.ndarray:
        """(n_assigned,) the client of every entry of ``members``."""
        return np.repeat(np.arange(self.m), self.sizes)

    def label_counts(self, labels: np.ndarray, num_classes: int) -> np.ndarray:
        """(m, C) training samples of each class held by each client."""
        counts = np.zeros((self.m, num_classes), dtype=np.int64)
        np.add.at(counts, (self.owner(), labels[self.members]), 1)
        return counts

    def padded(self, device: torch.device | str) -> Tensor:
        """(m, max size) member indices, rows padded with 0 beyond each client's size."""
        m, width = self.m, int(self.sizes.max())
        out = np.zeros((m, width), dtype=np.int64)
        pos = np.arange(self.members.size) - np.repeat(self.offsets[:-1], self.sizes)
        out[self.owner(), pos] = self.members
        return torch.from_numpy(out).to(device)


def _from_owner(owner: np.ndarray, m: int) -> Partition:
    """Partition from the client of every training sample (-1: unassigned)."""
    idx = np.flatnonzero(owner >= 0)
    order = np.lexsort((idx, owner[idx]))            # by client, then by sample index
    members = idx[order]
    offsets = np.concatenate([[0], np.cumsum(np.bincount(owner[idx], minlength=m))])
    return Partition(members.astype(np.int64), offsets.astype(np.int64))


def iid(n: int, m: int, rng: np.random.Generator) -> Partition:
    owner = np.empty(n, dtype=np.int64)
    owner[rng.permutation(n)] = np.arange(n) % m
    return _from_owner(owner, m)


def dirichlet(labels: np.ndarray, m: int, alpha: float, rng: np.random.Generator,
              min_samples: int = 10, max_tries: int = 1000) -> Partition:
    """Per class c: its samples, shuffled, cut at cumsum(p_c) * n_c with p_c ~ Dir(alpha 1_m)."""
    classes = np.unique(labels)
    for _ in range(max_tries):
        owner = np.empty(labels.size, dtype=np.int64)
        for c in classes:                                       # a loop over classes, not clients
            idx = rng.permutation(np.flatnonzero(labels == c))
            cuts = (np.cumsum(rng.dirichlet(np.full(m, alpha))) * idx.size).astype(np.int64)[:-1]
            owner[idx] = np.repeat(np.arange(m), np.diff(np.concatenate([[0], cuts, [idx.size]])))
        if np.bincount(owner, minlength=m).min() >= min_samples:
            return _from_owner(owner, m)
    raise ValueError(f"data.partition=dirichlet: no draw in {max_tries} gave every one of the {m} clients "
                     f">= {min_samples} samples (data.min_samples) with alpha={alpha}; use fewer clients, "
                     "a larger alpha or a smaller data.min_samples")


def pathological(labels: np.ndarray, m: int, c: int, rng: np.random.Generator) -> Partition:
    """m * c label-sorted shards of equal size (the remainder unassigned), c random ones per client."""
    n_shards = m * c
    order = np.lexsort((rng.random(labels.size), labels))       # by label, shuffled within a label
    size = labels.size // n_shards
    shard_owner = np.repeat(rng.permutation(n_shards) // c, size)   # shard s -> client perm[s] // c
    owner = np.full(labels.size, -1, dtype=np.int64)
    owner[order[:n_shards * size]] = shard_owner
    return _from_owner(owner, m)


def make(kind: str, labels: np.ndarray, m: int, rng: np.random.Generator, alpha: float | None = None,
         classes_per_client: int = 2, min_samples: int = 10) -> Partition:
    if kind == "iid":
        return iid(labels.size, m, rng)
    if kind == "dirichlet":
        return dirichlet(labels, m, float(alpha), rng, min_samples)
    if kind == "pathological":
        return pathological(labels, m, classes_per_client, rng)
    raise ValueError(f"data.partition={kind!r} is unknown; allowed: {', '.join(PARTITIONS)}")


def largest_remainder(shares: np.ndarray, total: int) -> np.ndarray:
    """(m, C) non-negative integers, each row summing to ``total``, proportional to ``shares``."""
    want = shares / shares.sum(1, keepdims=True) * total
    base = np.floor(want).astype(np.int64)
    short = total - base.sum(1)                                              # (m,)
    rank = np.argsort(np.argsort(-(want - base), axis=1, kind="stable"), axis=1)
    return base + (rank < short[:, None])


def local_test_sets(test_labels: np.ndarray, label_counts: np.ndarray, size: int,
                    rng: np.random.Generator) -> np.ndarray:
    """(m, size) test indices per client: class c appears in proportion to the client's training
    share of c (largest-remainder rounding), drawn without replacement within the client."""
    m, num_classes = label_counts.shape
    need = largest_remainder(label_counts.astype(np.float64), size)          # (m, C)
    start = np.cumsum(need, 1) - need                                        # column of class c in a row
    out = np.empty((m, size), dtype=np.int64)
    for c in range(num_classes):                                             # a loop over classes
        pool = np.flatnonzero(test_labels == c)
        k = int(need[:, c].max())
        if k == 0:
            continue
        if k > pool.size:
            raise ValueError(f"a local test set needs {k} test images of class {c}, the test set has "
                             f"{pool.size}; lower data.local_test_size")
        pick = pool[np.argsort(rng.random((m, pool.size)), axis=1)[:, :k]]     # (m, k) distinct
        rows, cols = np.nonzero(np.arange(k) < need[:, c:c + 1])
        out[rows, start[rows, c] + cols] = pick[rows, cols]
    return out


@dataclass
class Minibatch:
    """One batch per client: dataset indices (M, B), sample weights (M, B) (1 real, 0 padding),
    the augmentation crops (M, B, 3) or None, and ``flip`` (M,) or None: the clients whose labels
    are flipped to C - 1 - y (a label-flipping adversary's nodes)."""

    idx: Tensor
    weight: Tensor
    crops: Tensor | None
    flip: Tensor | None = None

    def materialise(self, data: Dataset, lo: int = 0, hi: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Float images (h, B, C, H, W), labels (h, B) and weights (h, B) of clients lo..hi."""
        sl = slice(lo, hi)
        crops = None if self.crops is None else self.crops[sl]
        x, y = data.train_batch(self.idx[sl], crops)
        if self.flip is not None:
            y = torch.where(self.flip[sl].unsqueeze(1), data.num_classes - 1 - y, y)
        return x, y, self.weight[sl]


class ClientSampler:
    """Every client's epoch-style batch stream over its own shard, advanced for many clients at once
    (see the module docstring). Randomness comes from ``generator`` in call order. Where each
    client is in its epoch (``step``) is kept on the host, so that drawing a batch reads nothing
    back from the device (only the shuffles and the batches are device work)."""

    def __init__(self, part: Partition, batch: int, generator: torch.Generator, augment: int = 0,
                 device: torch.device | str = "cpu", poisson: bool = False) -> None:
        """``poisson``: each batch takes every sample of the client's shard independently with rate
        B / n_i (Opacus's DPDataLoader; privacy.sampling=poisson): its size varies, the batch is
        padded to the largest of the step with weight-0 rows (at least one)."""
        self.poisson = poisson
        self.members = part.padded(device)                                     # (m, L)
        self.sizes = torch.from_numpy(part.sizes).to(device)                   # (m,)
        self.batch, self.gen, self.augment, self.device = batch, generator, augment, device
        self.order = torch.zeros_like(self.members)                            # current permutation
        self.sizes_host = np.asarray(part.sizes, dtype=np.int64)
        self.per_epoch = (self.sizes_host + batch - 1) // batch                # (m,) batches per epoch
        self._step = np.full(self.sizes_host.size, -1, dtype=np.int64)         # batch within epoch; -1: start

    @property
    def steps_per_epoch(self) -> torch.Tensor:
        """(m,) batches per epoch, on the device."""
        return torch.from_numpy(self.per_epoch).to(self.device)

    @property
    def step(self) -> torch.Tensor:
        """(m,) each client's batch within its epoch (-1: a fresh epoch next), a CPU tensor over the
        host's own array (writes into it land there; checkpoints copy it in)."""
        return torch.from_numpy(self._step)

    @step.setter
    def step(self, value) -> None:
        self._step = np.array(value.cpu().numpy() if isinstance(value, torch.Tensor) else value, dtype=np.int64)

    def next(self, clients: torch.Tensor) -> Minibatch:
        """The next batch of every client in ``clients`` (M,) int64 (a device tensor; its host copy,
        :func:`vecgossip.core.device.host_copy`, says who without a read)."""
        if self.poisson:
            return self.next_poisson(clients)
        c = host_copy(clients)
        step = self._step[c]
        fresh = (step < 0) | (step >= self.per_epoch[c])
        if fresh.any():
            rows = upload(c[fresh], self.device)
            keys = torch.rand(rows.numel(), self.members.shape[1], generator=self.gen, device=self.device)
            keys.masked_fill_(torch.arange(self.members.shape[1], device=self.device) >= self.sizes[rows, None], 2.0)
            self.order[rows] = self.members[rows].gather(1, keys.argsort(1))
            step = np.where(fresh, 0, step)
        pos = upload(step, self.device)[:, None] * self.batch + torch.arange(self.batch, device=self.device)  # (M, B)
        valid = pos < self.sizes[clients][:, None]
        idx = self.order[clients].gather(1, pos.clamp(max=self.members.shape[1] - 1))
        idx = torch.where(valid, idx, idx[:, :1])                              # padding: a real image
        self._step[c] = step + 1
        crops = (draw_crops(idx.shape, self.augment, self.gen, self.device) if self.augment else None)
        return Minibatch(idx, valid.to(torch.float32), crops)

    def next_poisson(self, clients: torch.Tensor) -> Minibatch:
        """Every sample of each client's shard in with probability B / n_i, independently (the
        sampled Gaussian mechanism's own sampling); a host read of the largest count sizes the batch."""
        length = self.members.shape[1]
        size = self.sizes[clients]
        rate = (self.batch / size.to(torch.float64)).clamp(max=1.0)
        u = torch.rand(clients.numel(), length, generator=self.gen, device=self.device, dtype=torch.float64)
        inside = (u < rate[:, None]) & (torch.arange(length, device=self.device) < size[:, None])    # (M, L)
        count = inside.sum(1)
        width = max(1, int(count.max()))
        first = torch.argsort((~inside).to(torch.int8), dim=1, stable=True)[:, :width]   # the included, in order
        idx = self.members[clients].gather(1, first)
        valid = torch.arange(width, device=self.device) < count[:, None]
        idx = torch.where(valid, idx, idx[:, :1])
        crops = draw_crops(idx.shape, self.augment, self.gen, self.device) if self.augment else None
        return Minibatch(idx, valid.to(torch.float32), crops)

    def steps(self, local_steps: int | None, local_epochs: int | None) -> np.ndarray:
        """(m,) local iterations per round (host): K, or E * ceil(n_i / B)."""
        if local_steps is not None:
            return np.full(self.sizes_host.size, local_steps, dtype=np.int64)
        return self.per_epoch * local_epochs


def default_test_size(test_labels: np.ndarray, label_counts: np.ndarray) -> int:
    """ceil(test size / m) (the DisPFL/DFedSAM code's local test size), lowered where a client's
    label mix would need more images of a class than the test set holds (few, skewed clients)."""
    m, num_classes = label_counts.shape
    pool = np.broadcast_to(np.bincount(test_labels, minlength=num_classes), (m, num_classes))
    share = label_counts / label_counts.sum(1, keepdims=True)                   # (m, C)
    held = share > 0
    feasible = np.floor((pool[held] - 1) / share[held]).min()   # rounding adds <= 1 image per class
    return int(max(1, min(math.ceil(test_labels.size / m), feasible)))
