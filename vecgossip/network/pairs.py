"""Pairwise averages (AD-PSGD, Lian et al. 2018): disjoint batches of pairs that apply in order,
and the averaging matrix of one batch."""
from __future__ import annotations

import scipy.sparse as sp


def pair_batches(pairs: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """``pairs`` in order, grouped into batches of disjoint pairs such that applying the batches in
    turn equals applying the pairs one by one in order (level scheduling: a pair goes one batch
    after the last batch holding a pair it shares a node with)."""
    level: dict[int, int] = {}
    batches: list[list[tuple[int, int]]] = []
    for i, j in pairs:
        b = max(level.get(i, -1), level.get(j, -1)) + 1
        level[i] = level[j] = b
        if b == len(batches):
            batches.append([])
        batches[b].append((i, j))
    return batches


def average_matrix(n: int, pairs: list[tuple[int, int]]) -> sp.csr_matrix:
    """W: 1/2 on both nodes of every (disjoint) pair, 1 on every other node's diagonal."""
    w = sp.lil_matrix((n, n))
    w.setdiag(1.0)
    for i, j in pairs:
        w[i, i] = w[j, j] = w[i, j] = w[j, i] = 0.5
    return w.tocsr()
