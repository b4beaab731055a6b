"""Per-node privacy accounting by a kept library: Opacus's accountants (RDP: Mironov 2017 and
Mironov, Talwar, Zhang 2019 for the sampled Gaussian; PRV: Gopi, Lee, Wutschitz 2021).

Node i's DP-SGD is the sampled Gaussian mechanism with noise multiplier sigma, sampling rate
q_i = B / n_i (its batch over its own shard's size) and s_i steps (its own local iterations).
The bound applied is Opacus's, i.e. the one for Poisson subsampling at rate q_i; vecgossip's
samplers draw fixed-size batches by shuffling each epoch (data/partition.py), for which the
Poisson bound is what DP-SGD papers and Opacus report but is not a proof (Chua et al. 2024 show
shuffling can be weaker); ``docs/privacy.md`` says so."""
from __future__ import annotations

from functools import lru_cache

import numpy as np


@lru_cache(maxsize=4096)
def epsilon(sigma: float, q: float, steps: int, delta: float, accountant: str = "rdp") -> float:
    """(epsilon at ``delta``) of ``steps`` sampled Gaussian steps at rate ``q``, noise ``sigma``:
    0 before any step, inf without noise."""
    if steps == 0:
        return 0.0
    if sigma == 0:
        return float("inf")
    from opacus.accountants import PRVAccountant, RDPAccountant
    acc = RDPAccountant() if accountant == "rdp" else PRVAccountant()
    acc.history = [(float(sigma), float(min(1.0, q)), int(steps))]
    return float(acc.get_epsilon(delta))


def node_epsilons(sigma: float, rates: np.ndarray, steps: np.ndarray, delta: float,
                  accountant: str = "rdp") -> np.ndarray:
    """(m,) each node's epsilon, from its sampling rate and step count (nodes sharing both share
    the call)."""
    return np.array([epsilon(sigma, float(q), int(s), delta, accountant) for q, s in zip(rates, steps)])
