"""What each receiver hears at one step, as data (issue 37): the realized mixing matrix W (after
faults: a lost message is not there) as an edge list and as per-receiver neighbourhoods, the shape
a nonlinear aggregation (a median, a trimmed mean, clipping) reads. Message passing in
graph-learning terms: a message per edge j -> i, an aggregation per receiver, an update; here the
node features are whole models."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

Tensor = torch.Tensor


@dataclass(frozen=True)
class Neighbourhoods:
    """The messages into receivers ``receivers`` (R,) (global indices, ascending) at one step.

    ``index`` (R, d_max): the senders j of each receiver's messages (global indices, ascending;
    padded with the receiver itself); ``mask`` (R, d_max): a real message; ``weight`` (R, d_max):
    W_ij (0 where padded); ``self_weight`` (R,): W_ii; ``degree`` (R,): messages received. A
    self-loop (W_ii) is never a message."""

    receivers: np.ndarray
    index: Tensor
    mask: Tensor
    weight: Tensor
    self_weight: Tensor
    degree: Tensor

    @property
    def d_max(self) -> int:
        return int(self.index.shape[1])

    def edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The edge list (senders, receivers, weights), receiver-major, each row's senders ascending."""
        mask = self.mask.cpu().numpy()
        recv = np.broadcast_to(self.receivers[:, None], mask.shape)[mask]
        return self.index.cpu().numpy()[mask], recv, self.weight.cpu().numpy()[mask]

    def rows(self, lo: int, hi: int) -> "Neighbourhoods":
        """Receivers lo .. hi - 1 of these (a chunk), their d_max kept."""
        return Neighbourhoods(self.receivers[lo:hi], self.index[lo:hi], self.mask[lo:hi], self.weight[lo:hi],
                              self.self_weight[lo:hi], self.degree[lo:hi])


def in_degree(w: sp.spmatrix) -> np.ndarray:
    """(N,) the messages each receiver gets: row i's nonzero off-diagonal entries of W."""
    coo = sp.coo_matrix(w)
    off = (coo.row != coo.col) & (coo.data != 0)
    return np.bincount(coo.row[off], minlength=w.shape[0])


def neighbourhoods(w: sp.spmatrix, lo: int = 0, hi: int | None = None, device="cpu",
                   dtype: torch.dtype = torch.float32, width: int | None = None) -> Neighbourhoods:
    """The neighbourhoods of receivers ``lo .. hi - 1`` (a rank's rows) from W (receiver by sender,
    scipy): row i's off-diagonal entries are i's messages. ``width``: d_max at least this (the
    whole graph's, so that every rank's blocks and per-edge state have one shape)."""
    w = sp.csr_matrix(w)
    hi = w.shape[0] if hi is None else hi
    rows = w[lo:hi].tocoo()
    recv, send, val = rows.row + lo, rows.col, rows.data
    off = (recv != send) & (val != 0)
    order = np.lexsort((send[off], recv[off]))
    recv, send, val = recv[off][order], send[off][order], val[off][order]
    n = hi - lo
    degree = np.bincount(recv - lo, minlength=n)
    d_max = max(int(degree.max()) if n else 0, int(width or 0))
    slot = np.arange(recv.size) - np.repeat(np.cumsum(degree) - degree, degree)
    index = np.repeat(np.arange(lo, hi)[:, None], max(d_max, 1), axis=1)[:, :d_max]
    weight = np.zeros((n, d_max))
    mask = np.zeros((n, d_max), dtype=bool)
    index[recv - lo, slot], weight[recv - lo, slot], mask[recv - lo, slot] = send, val, True
    diag = np.asarray(w[lo:hi].diagonal(lo), dtype=np.float64).ravel()          # W_ii of the rows
    t = lambda a, dt=None: torch.from_numpy(np.ascontiguousarray(a)).to(device, dt)  # noqa: E731
    return Neighbourhoods(np.arange(lo, hi), t(index, torch.long), t(mask), t(weight, dtype), t(diag, dtype),
                          t(degree, torch.long))


def slots(nb: Neighbourhoods, links: Neighbourhoods) -> Tensor:
    """(R, d) each message's slot among its receiver's neighbours in ``links`` (the topology's own
    graph, same receivers): where per-edge state keeps that link (a sender not among them: its
    receiver's last slot; cannot happen when ``nb`` is a realization of ``links``' graph)."""
    n = int(max(links.index.max().item() if links.index.numel() else 0,
                nb.index.max().item() if nb.index.numel() else 0)) + 1
    ordered = torch.where(links.mask, links.index, n)          # padding after every sender
    found = torch.searchsorted(ordered.contiguous(), nb.index.contiguous())
    return found.clamp(max=max(links.d_max - 1, 0))
