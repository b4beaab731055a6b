"""The messages a round actually sent (issue 55: the message is the unit of time). The clock times
these and nothing else: a matrix an algorithm only read (``ctx.neighbourhoods``, ``ctx.messages``)
posts nothing; each message has its own size, its sender's payload.

What counts as a message: at gossip step q of round t, every off-diagonal entry W_ij != 0 of a
realized matrix that was mixed or gathered (``ctx.gossip``, ``ctx.mix``, ``ctx.gather``) is one
message j -> i, of the bytes its sender's payload declared for that call (``bytes=``; by default
the tensor's row as sent). Lost messages (faults, a receiver offline under churn) are not in the
realized matrix, so they are not sent. Several tensors over one link at one step travel as one
message whose size is the sum of their payloads (gradient tracking's x and y; SGP's numerator and
weight); a sender whose payload is 0 bytes sends nothing (an event-triggered method that stays
quiet). Phases follow the gossip steps in order; a round with no message is compute only."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp


class Outbox:
    """The round's sent messages by gossip step: :meth:`post` as they go, :meth:`take` at the
    round's end."""

    def __init__(self, m: int) -> None:
        self.m = m
        self.posted: dict[int, list[tuple[sp.spmatrix, np.ndarray]]] = {}

    def post(self, step: int, w: sp.spmatrix, size: np.ndarray) -> None:
        """The messages of realized matrix ``w`` (receiver-by-sender) at ``step``, each of its
        sender's ``size`` (m,) bytes."""
        self.posted.setdefault(int(step), []).append((w, size))

    def take(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The round's phases in gossip-step order, each (sender, receiver, bytes) sorted by
        sender, then receiver (the order a FIFO uplink serves them), and empty the outbox."""
        posted, self.posted = self.posted, {}
        return [merged(posted[q], self.m) for q in sorted(posted)]


def merged(entries: list[tuple[sp.spmatrix, np.ndarray]], m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One step's messages: every off-diagonal nonzero j -> i of each matrix with its sender's
    bytes, zero-byte payloads left out, one message per link (the payloads over it summed)."""
    keys, sizes = [np.zeros(0, np.int64)], [np.zeros(0)]
    for w, size in entries:
        coo = w.tocoo()
        off = (coo.row != coo.col) & (coo.data != 0)
        send, recv = coo.col[off].astype(np.int64), coo.row[off].astype(np.int64)
        b = size[send]
        keep = b > 0
        keys.append(send[keep] * m + recv[keep])
        sizes.append(b[keep])
    key, at = np.unique(np.concatenate(keys), return_inverse=True)       # sorted: by sender, then receiver
    total = np.bincount(at, weights=np.concatenate(sizes), minlength=key.size)
    return key // m, key % m, total


def payload_bytes(size, m: int, name: str = "bytes") -> np.ndarray:
    """A payload's bytes per sender, (m,) float: a number for every sender or one per sender;
    non-negative and finite, else ValueError in one line naming ``name``."""
    b = np.asarray(size, dtype=float)
    if b.ndim == 0:
        b = np.full(m, float(b))
    if b.shape != (m,):
        raise ValueError(f"{name} must be a number or one per client ({m},), got shape {b.shape}")
    if not np.isfinite(b).all() or (b < 0).any():
        raise ValueError(f"{name} must be finite and >= 0 bytes")
    return b
