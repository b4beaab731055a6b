"""Muffliato's pairwise network DP (Cyffers, Even, Bellet and Massoulié 2022, "Muffliato: Peer-to-Peer
Privacy Amplification for Decentralized Optimization and Averaging", Theorem 1): node u adds
Gaussian noise of standard deviation sigma to a value of sensitivity Delta, then K gossip steps
x <- W x run; node v sees what its neighbours w send at every step, x_w^t = (W^t (x + eta))_w.
Changing u's value moves that message's mean by (W^t)_{wu} Delta, its noise has variance
sigma^2 ||W^t_w||^2, so by the Gaussian's Renyi divergence and composition over the messages

    eps_{u->v}(alpha) <= alpha Delta^2 / (2 sigma^2) * min(1, sum_{t=0}^{K-1} sum_{w in N(v)} (W^t)_{uw}^2 / ||W^t_w||^2)

(the min: v's view is a post-processing of the whole noisy vector, which is u's local DP).
Over R rounds with fresh noise each round (Muffliato-SGD), round r's noise is still seen in
every later gossip step, so its share grows with the steps left, (R - r + 1) K; the rounds
compose (adaptive composition of RDP):

    eps_{u->v}(alpha) <= alpha Delta^2 / (2 sigma^2) * sum_{j=1}^{R} min(1, S_{jK}(u, v)),
    S_h(u, v) = sum_{t=0}^{h-1} sum_{w in N(v)} (W^t)_{uw}^2 / ||W^t_w||^2

(the noise of the later injections, which only adds variance, is left out: an upper bound).
No subsampling amplification is claimed for the network bound. :func:`to_dp` converts to
(epsilon, delta) with Opacus's RDP-to-DP conversion."""
from __future__ import annotations

import numpy as np


def pairwise_share(w: np.ndarray, steps: int, rounds: int = 1) -> np.ndarray:
    """(n, n) sum_{j=1}^{rounds} min(1, S_{j steps}(u, v)) for a symmetric gossip matrix ``w``
    (N(v): v's neighbours, v excluded); the diagonal is ``rounds`` (a node's own local DP)."""
    n = w.shape[0]
    adj = ((w != 0) & ~np.eye(n, dtype=bool)).astype(float)      # N(v) as adj[:, v]
    running, share = np.zeros((n, n)), np.zeros((n, n))
    power = np.eye(n)
    for h in range(1, steps * rounds + 1):
        ratio = power.T ** 2 / (power ** 2).sum(1)[None, :]      # [u, w] = (W^t)_{wu}^2 / ||W^t_w||^2
        running += ratio @ adj                                   # sum over w in N(v)
        power = w @ power
        if h % steps == 0:
            share += np.minimum(1.0, running)
    np.fill_diagonal(share, rounds)
    return share


def rdp_orders() -> np.ndarray:
    from opacus.accountants.rdp import RDPAccountant
    return np.array(RDPAccountant.DEFAULT_ALPHAS, dtype=float)


def to_dp(rdp_per_alpha: float, delta: float) -> float:
    """epsilon at ``delta`` of a mechanism with eps(alpha) = rdp_per_alpha * alpha (a Gaussian's
    RDP curve), by Opacus's conversion over its default orders."""
    from opacus.accountants.analysis.rdp import get_privacy_spent
    orders = rdp_orders()
    if rdp_per_alpha == 0:
        return 0.0
    eps, _ = get_privacy_spent(orders=orders, rdp=orders * rdp_per_alpha, delta=delta)
    return float(eps)


def network_epsilons(w: np.ndarray, gossip_steps: int, sigma: float, rounds: int, delta: float,
                     sensitivity: float = 1.0) -> tuple[np.ndarray, float]:
    """((n, n) pairwise epsilon_{u->v} at ``delta`` after ``rounds`` Muffliato rounds of
    ``gossip_steps`` each (the diagonal: u's own local DP), the local DP epsilon of the same noise
    without subsampling amplification (what the network bound is compared with))."""
    share = pairwise_share(w, gossip_steps, rounds)
    per_alpha = sensitivity ** 2 / (2 * sigma ** 2)
    values = {s: to_dp(per_alpha * s, delta) for s in np.unique(np.round(share, 12))}
    eps = np.vectorize(lambda s: values[s])(np.round(share, 12))
    return eps, to_dp(per_alpha * rounds, delta)
