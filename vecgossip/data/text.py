"""Text data sets on the device (``data=shakespeare``): the roles a run keeps, their windows as a
:class:`~vecgossip.data.dataset.Dataset` of uint8 character windows, and which node holds what.

Roles are nodes. The usable roles (at least ``data.min_lines`` speeches, and enough text for
LEAF's split to leave a test window: :func:`vecgossip.data.shakespeare.usable`) are listed in play
order; a run of ``n`` nodes keeps all of them when n equals their number, else n of them drawn
without replacement from the stream ``data.sample_seed`` (LEAF's ``--smplseed``: the same roles
whatever the run's seed, so seeds and replicas differ only in training), kept in play order.

``data.split=roles`` (the naturally non-IID task): node i holds role i's training windows and is
tested on its own test windows. ``data.split=iid`` (the FedAvg paper's IID comparison): the kept
roles' training windows pooled, shuffled (stream (sample_seed, 1)) and dealt to the n nodes in
near-equal parts, their test windows likewise (stream (sample_seed, 2)); the same windows as the
non-IID split, only their owners differ.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from vecgossip.data import shakespeare
from vecgossip.data.dataset import Dataset, LabelIndex, resolve_root

SPLITS = ("roles", "iid")


@lru_cache(maxsize=4)
def usable_roles(root: str, text_file: str | None, min_lines: int, frac: float) -> tuple:
    """The usable roles, in play order (parsed once per process)."""
    return tuple(shakespeare.usable(shakespeare.read_roles(Path(root), text_file, min_lines), frac))


def role_count(d) -> int:
    """How many roles ``data`` (a DataConfig) offers (for the validator's one-line errors)."""
    return len(usable_roles(str(resolve_root(d.root)), d.text_file, d.min_lines, d.train_frac))


def chosen_roles(d, n: int) -> list:
    """The n roles a run keeps (module docstring); ValueError with one line if there are fewer."""
    every = usable_roles(str(resolve_root(d.root)), d.text_file, d.min_lines, d.train_frac)
    if n > len(every):
        raise ValueError(f"topology.n={n} is more than the {len(every)} roles of data={d.name} with at least "
                         f"data.min_lines={d.min_lines} speeches and a test window: use at most {len(every)} "
                         "nodes/clients or a smaller data.min_lines")
    if n == len(every):
        return list(every)
    pick = np.sort(np.random.default_rng([d.sample_seed, 0]).choice(len(every), n, replace=False))
    return [every[i] for i in pick]


def deal(m: int, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(order (m,), offsets (n + 1,)): m samples shuffled and dealt to n nodes in near-equal parts."""
    sizes = np.full(n, m // n) + (np.arange(n) < m % n)
    return rng.permutation(m), np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def load_text(d, n: int, device: torch.device | str = "cpu") -> tuple[Dataset, Dataset]:
    """The (train, test) windows of the n kept roles as Datasets on ``device`` (``groups``: each
    node's rows)."""
    if d.split not in SPLITS:
        raise ValueError(f"data.split={d.split!r} is unknown; allowed: {', '.join(SPLITS)}")
    data = shakespeare.build(chosen_roles(d, n), d.train_frac)
    parts = [(data.x, data.y, data.offsets), (data.test_x, data.test_y, data.test_offsets)]
    if d.split == "iid":
        parts = [(x[order], y[order], off) for (x, y, _), order, off in
                 ((parts[k], *deal(parts[k][1].size, n, np.random.default_rng([d.sample_seed, k + 1]))) for k in (0, 1))]
    label = "Shakespeare (LEAF, " + ("complete works" if d.text_file else "Gutenberg etexts") + ")"
    out = []
    for x, y, off in parts:
        labels = torch.from_numpy(y.astype(np.int64))
        out.append(Dataset(torch.from_numpy(x), labels, LabelIndex.of(labels, len(shakespeare.VOCAB)), 1.0,
                           name=d.name, source=label, tokens=True, groups=off).to(device))
    return out[0], out[1]
