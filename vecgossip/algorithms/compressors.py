"""Compression operators Q for compressed gossip (CHOCO-SGD, Koloskova, Stich, Jaggi, ICML 2019,
section 3 and Table 1), row by row over node-first tensors, with the bytes one compressed row
would take on the wire.

* ``identity``: Q(x) = x.                                   bytes: P values
* ``top_k``: the k = round(fraction P) entries of largest magnitude, the rest 0 (not rescaled:
  a delta-contraction with delta = k / P).                 bytes: k values + k 32-bit indices
* ``rand_k``: k entries chosen uniformly at random (not rescaled; delta = k / P), drawn from a
  generator seeded per node and round (what a sender and its receivers can both regenerate).
                                                           bytes: k values + the 64-bit seed
* ``qsgd``: QSGD with s = ``levels`` levels (Alistarh et al. 2017), scaled by 1 / tau,
  tau = 1 + min(P / s^2, sqrt(P) / s), as CHOCO-SGD's Table 1 makes it a contraction:
  Q(x) = ||x||_2 sign(x) floor(s |x| / ||x||_2 + u) / (s tau), u ~ U[0, 1) per entry.
                                                           bytes: P (ceil(log2(s + 1)) + 1) bits + the 32-bit norm
* ``sign``: the scaled sign, Q(x) = ||x||_1 / P sign(x) (Karimireddy et al. 2019).
                                                           bytes: P bits + the 32-bit scale

Every random draw of a row comes from a torch generator seeded by (``key``, the row's global
node index): the same numbers whatever process or chunk the row is computed in (a sharded run
equals one process)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

Tensor = torch.Tensor
COMPRESSORS = ("identity", "top_k", "rand_k", "qsgd", "sign")


@dataclass(frozen=True)
class Compressor:
    """A compression operator Q (the module docstring's table): ``name``, ``fraction`` for top_k
    and rand_k, ``levels`` for qsgd; called on rows, it returns Q of each."""

    name: str = "top_k"
    fraction: float = 0.01        # top_k / rand_k: the share of entries kept
    levels: int = 16              # qsgd: s

    def __post_init__(self) -> None:
        if self.name not in COMPRESSORS:
            raise ValueError(f"compressor={self.name!r} is unknown; allowed: {', '.join(COMPRESSORS)}")
        if not 0.0 < self.fraction <= 1.0:
            raise ValueError(f"fraction must be in (0, 1], got {self.fraction}")
        if self.levels < 1:
            raise ValueError(f"levels must be an integer >= 1, got {self.levels}")

    def k(self, p: int) -> int:
        """Entries kept of a row of ``p`` (top_k / rand_k): round(fraction p), at least 1."""
        return max(1, min(p, int(round(self.fraction * p))))

    def row_bytes(self, p: int, value_bytes: int) -> float:
        """Bytes of one compressed row of ``p`` entries (``value_bytes`` per value)."""
        if self.name == "identity":
            return float(p * value_bytes)
        if self.name == "top_k":
            return float(self.k(p) * (value_bytes + 4))
        if self.name == "rand_k":
            return float(self.k(p) * value_bytes + 8)
        if self.name == "qsgd":
            return (p * (math.ceil(math.log2(self.levels + 1)) + 1) + 32) / 8
        return (p + 32) / 8                                                  # sign

    def __call__(self, x: Tensor, nodes: np.ndarray, key: int) -> Tensor:
        """Q of every row of ``x`` (M, P), rows belonging to the global ``nodes`` (M,); ``key``
        seeds the random compressors (one per round). A new tensor."""
        if self.name == "identity":
            return x.clone()
        m, p = x.shape
        if self.name == "sign":
            scale = x.abs().sum(1, keepdim=True) / p                         # (M, 1)
            return scale * torch.sign(x)
        if self.name == "top_k":
            idx = x.abs().topk(self.k(p), dim=1).indices                     # (M, k)
            return torch.zeros_like(x).scatter_(1, idx, x.gather(1, idx))
        gens = [torch.Generator().manual_seed(int(np.random.SeedSequence([key, int(i)]).generate_state(1)[0]))
                for i in nodes]                                              # one per node and round
        if self.name == "rand_k":
            idx = torch.stack([torch.randperm(p, generator=g)[:self.k(p)] for g in gens]).to(x.device)
            return torch.zeros_like(x).scatter_(1, idx, x.gather(1, idx))
        s = self.levels                                                      # qsgd
        u = torch.stack([torch.rand(p, generator=g, dtype=x.dtype) for g in gens]).to(x.device)   # (M, P)
        norm = x.norm(dim=1, keepdim=True)                                   # (M, 1)
        safe = torch.where(norm > 0, norm, torch.ones_like(norm))
        level = torch.floor(s * x.abs() / safe + u)
        tau = 1.0 + min(p / s ** 2, math.sqrt(p) / s)
        return norm * torch.sign(x) * level / (s * tau)
