"""Per-node privacy accounting by kept libraries: Opacus's accountants (RDP: Mironov 2017 and
Mironov, Talwar, Zhang 2019 for the sampled Gaussian; PRV: Gopi, Lee, Wutschitz 2021) and Google's
dp-accounting PLD accountant (privacy loss distributions, add or remove one example; the optional
extra ``vecgossip[pld]``).

Node i's DP-SGD is the sampled Gaussian mechanism with noise multiplier sigma, sampling rate
q_i and s_i steps (its own local iterations). The bound applied is the one for Poisson
subsampling at rate q_i. With ``privacy.sampling=poisson`` (round engine) the batches are drawn
that way and the bound holds for them; the default draws fixed-size batches by shuffling each
epoch (data/partition.py), for which the Poisson bound is what DP-SGD papers and Opacus report but
is not a proof (Chua et al. 2024 show shuffling can be weaker); summary.json and
``docs/privacy.md`` say which.

The neighbouring relation throughout: one example of one node added or removed. Several
mechanisms that can touch the same example compose (:func:`composed_epsilon`): an example of the
tick engine's shared pool can be drawn by every node."""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from vecgossip.core.errors import ConfigError

ACCOUNTANTS = ("rdp", "prv", "pld")


def composed_epsilon(sigma: float, parts: tuple[tuple[float, int], ...], delta: float, accountant: str = "rdp") -> float:
    """epsilon at ``delta`` of sampled Gaussian mechanisms at noise ``sigma``, ``parts`` ((rate,
    steps), ...) composed: 0 before any step, inf without noise, never negative."""
    parts = tuple((float(min(1.0, q)), int(s)) for q, s in parts if s > 0 and q > 0)
    if not parts:
        return 0.0
    if sigma == 0:
        return float("inf")
    if accountant == "pld":
        try:
            import dp_accounting
            from dp_accounting.pld import pld_privacy_accountant
        except ImportError:
            raise ConfigError("privacy.accountant=pld needs Google's dp-accounting: pip install 'vecgossip[pld]'") from None
        acc = pld_privacy_accountant.PLDAccountant()
        for q, s in parts:
            acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(float(sigma))), s)
        return max(0.0, float(acc.get_epsilon(delta)))
    from opacus.accountants import PRVAccountant, RDPAccountant
    acc = RDPAccountant() if accountant == "rdp" else PRVAccountant()
    acc.history = [(float(sigma), q, s) for q, s in parts]
    return max(0.0, float(acc.get_epsilon(delta)))


@lru_cache(maxsize=4096)
def epsilon(sigma: float, q: float, steps: int, delta: float, accountant: str = "rdp") -> float:
    """(epsilon at ``delta``) of ``steps`` sampled Gaussian steps at rate ``q``, noise ``sigma``:
    0 before any step, inf without noise, never negative."""
    if steps == 0:
        return 0.0
    return composed_epsilon(sigma, ((q, steps),), delta, accountant)


def node_epsilons(sigma: float, rates: np.ndarray, steps: np.ndarray, delta: float,
                  accountant: str = "rdp") -> np.ndarray:
    """(m,) each node's epsilon, from its sampling rate and step count (nodes sharing both share
    the call)."""
    return np.array([epsilon(sigma, float(q), int(s), delta, accountant) for q, s in zip(rates, steps)])


def sigma_for(target: float, q: float, steps: int, delta: float, accountant: str = "rdp",
              rel: float = 1e-3) -> float:
    """The noise multiplier at which ``steps`` steps at rate ``q`` spend ``target`` epsilon at
    ``delta`` (bisection on sigma, to ``rel`` relative in epsilon; epsilon falls as sigma grows)."""
    lo, hi = 1e-2, 1.0
    while epsilon(hi, q, steps, delta, accountant) > target:
        lo, hi = hi, 2 * hi
        if hi > 1e6:
            raise ConfigError(f"privacy.target_epsilon={target} is out of reach: {steps} steps at rate {q:.3g} "
                              f"spend more than it at any noise multiplier up to 1e6")
    while True:                                   # epsilon(hi) <= target < epsilon(lo)
        mid = (lo + hi) / 2
        eps = epsilon(mid, q, steps, delta, accountant)
        if eps <= target and target - eps <= rel * target:
            return mid
        if hi - lo <= 1e-12 * hi:
            return hi
        lo, hi = (mid, hi) if eps > target else (lo, mid)
