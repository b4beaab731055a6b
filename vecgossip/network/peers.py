"""Directed send links over a planned graph, and the transfer-learning peer rule (paper section
III-C3).

A node i sends to the peers it has *added*. ``targets`` (N, kmax) lists each node's planned peers in
name order (-1 pads nodes of smaller degree); ``active`` (N, kmax) marks the added ones. In plain
gossip every planned link is active from the start; in the TL variant none is, and every
``period`` ticks a node that scores >= add_at on 100 samples of its own label mix adds ONE planned
peer (the first not yet added), one that scores <= drop_at drops a random added peer.
"""
from __future__ import annotations

from typing import Annotated

import numpy as np
import scipy.sparse as sp
from pydantic import Field, model_validator

from vecgossip.core.options import Options

from vecgossip.network.mixing import adjacency
from vecgossip.network.topology import Graph


Share = Annotated[float, Field(ge=0, le=1)]


class TLConfig(Options):
    """The transfer-learning peer rule's options (``engine.tl``; section III-C3)."""

    enabled: bool = False                 # the rule on: every node starts with no peers (what ``tl=true`` sets)
    period: Annotated[int, Field(ge=1)] = 50      # ticks between self-tests
    add_at: Share = 0.8                   # accuracy at which one planned peer is added
    drop_at: Share = 0.2                  # accuracy at which a random peer is dropped
    samples: Annotated[int, Field(ge=1)] = 100    # self-test samples drawn from the node's own label mix

    @model_validator(mode="after")
    def _add_above_drop(self) -> "TLConfig":
        if self.add_at <= self.drop_at:
            raise ValueError(f"engine.tl.add_at ({self.add_at}) must be above engine.tl.drop_at ({self.drop_at})")
        return self


class Links:
    def __init__(self, graph: Graph, active: bool = True) -> None:
        self.n = graph.n
        a = adjacency(graph).tocsr()
        a.sort_indices()
        deg = np.diff(a.indptr)
        rows = np.repeat(np.arange(graph.n), deg)
        cols = np.arange(a.nnz) - np.repeat(a.indptr[:-1], deg)                 # position within row
        self.targets = np.full((graph.n, int(deg.max())), -1, dtype=np.int64)   # (N, kmax)
        self.targets[rows, cols] = a.indices
        self.planned = self.targets >= 0                                      # (N, kmax)
        self.active = self.planned & active                                  # (N, kmax)
        self.planned_in = np.bincount(self.targets[self.planned], minlength=self.n)  # planned senders

    def matrix(self) -> sp.csc_matrix:
        """(N, N) receiver-by-sender 0/1 matrix of the active links."""
        src = np.broadcast_to(np.arange(self.n)[:, None], self.targets.shape)[self.active]
        dst = self.targets[self.active]
        a = sp.coo_matrix((np.ones(src.size, dtype=np.float32), (dst, src)), shape=(self.n, self.n))
        return a.tocsc()

    def in_degree(self) -> np.ndarray:
        """(N,) current number of nodes sending to each node."""
        return np.bincount(self.targets[self.active], minlength=self.n)

    def buffer_size(self, R: int) -> np.ndarray:
        """(N,) R x current senders. III-C3's round(planned buffer / planned peers x current
        senders) keeps R constant; with planned buffer = R x planned peers it is exactly this."""
        return (R * self.in_degree()).astype(np.float64)

    def add_first(self, nodes: np.ndarray) -> np.ndarray:
        """Nodes (bool mask (N,)) add their first planned, not yet added peer. Returns who changed."""
        free = self.planned & ~self.active & nodes[:, None]
        has = free.any(1)
        col = np.argmax(free, 1)
        self.active[np.flatnonzero(has), col[has]] = True
        return has

    def drop_random(self, nodes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Nodes (bool mask (N,)) drop one uniformly random added peer. Returns who changed."""
        cand = self.active & nodes[:, None]
        has = cand.any(1)
        score = np.where(cand, rng.random(cand.shape), -1.0)
        col = np.argmax(score, 1)
        self.active[np.flatnonzero(has), col[has]] = False
        return has
