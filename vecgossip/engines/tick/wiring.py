"""The tick engine's links as operators: the active links (the peer rule adds and drops them; an
isolated node loses its own) as the send operator of this rank's receivers and each node's
buffer size, rebuilt whenever the links change."""
from __future__ import annotations

import numpy as np
import torch

from vecgossip.core.device import upload
from vecgossip.network.mixing import DENSE_ABOVE, SendOperator
from vecgossip.network.peers import Links
from vecgossip.runtime.shard import Shard


class Wiring:
    """``a_full`` (N, N) every active link (receiver by sender, on every rank), ``send`` this rank's
    receivers' rows as a :class:`~vecgossip.network.mixing.SendOperator`, ``buffer_size`` (N',)
    R x each receiver's current senders, on the device and on the host (``buffer_size_host``:
    who averages is decided there)."""

    def __init__(self, links: Links, shard: Shard, R: int, device: torch.device, dtype: torch.dtype) -> None:
        self.links, self.shard, self.R, self.device, self.dtype = links, shard, R, device, dtype
        self.rewire()

    def rewire(self) -> None:
        """(Re)build the operators from the active links."""
        sh, n = self.shard, self.links.n
        self.a_full = self.links.matrix()
        dense = self.a_full.nnz / max(1, n * n) > DENSE_ABOVE   # the one-process choice
        self.send = SendOperator(self.a_full[sh.lo:sh.hi] if sh.sharded else self.a_full, self.device, dense,
                                 self.dtype)
        self.buffer_size_host = self.links.buffer_size(self.R)[sh.lo:sh.hi]
        self.buffer_size = upload(self.buffer_size_host, self.device, torch.float32)

    def cut(self, nodes: np.ndarray) -> None:
        """These nodes send no more (isolated): receivers' buffer sizes follow their remaining senders."""
        self.links.active[nodes] = False
        self.rewire()
