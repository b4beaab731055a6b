"""The network DP of gossip with noise injected every round (Muffliato: Cyffers, Even, Bellet and
Massoulié 2022), as a bound that holds: the observer's whole view as one linear Gaussian mechanism.

Setting (Muffliato-SGD, one private local step per round): in round r every node u adds its
update g_u^r with fresh Gaussian noise of standard deviation sigma Delta (Delta: the update's
sensitivity, the clip C) to its model, then K gossip steps x <- W x run. The state after the
injection is s_r = W^K s_{r-1} + z_r, z_r = g^r + noise (n nodes; every model coordinate is an
independent copy of this scalar system with the same W, so one scalar system is analysed). Node v
observes, every round: what each neighbour w sends at gossip steps t = 0 .. K-1, (W^t s_r)_w, and
its own model at every step, (W^t s_r)_v for t = 0 .. K (which gives it its own injection too).
These are linear in the injections: the view is a linear Gaussian mechanism, with no noise of its
own.

Neighbouring data sets differ in one example of node u, which moves u's update in round j by at
most Delta (any direction, and adaptively: the update may depend on everything seen before). The
exact Renyi divergence of the view is computed by the innovations of a Kalman filter over s_r (state
dimension n, noise-free observations, pseudo-inverses where the innovation covariance is
singular): round r's new observations, given all earlier ones, are Gaussian with covariance S_r
(the same under both data sets) and a mean shift e_r = sum_{j<=r} G_{rj} delta_j linear in u's
shifts delta_j of rounds j <= r. By adaptive composition of RDP (each round's conditional release
bounded for every history),

    eps_{u->v}(alpha) <= alpha / (2 sigma^2) * sum_r sum_{j,k<=r} |H^r_{jk}|,   H^r_{jk} = G_{rj}^T S_r^+ G_{rk}

(unit injections; |<delta_j, delta_k>| <= Delta^2 bounds the cross terms of any directions), and
never more than u's local RDP of R rounds, alpha R / (2 sigma^2) (the view is a post-processing of
u's noisy updates). When v can solve its view for u's noisy update (the reconstruction case) the
first round's term is the local one exactly. The bound adds no subsampling amplification and
assumes a fixed W, every node noising every round, messages as sent (no faults), no Byzantine node
and full participation; the engine reports it only then (``network_summary``).

This replaces the bound of the NeurIPS paper's Theorem 1 used before (a sum over messages as if
independent, which the messages are not: on a ring of 16 with K = 4 a node recovers its
3-hop neighbour's noisy value exactly while that bound reported 0.98 against a local 3.21; the
paper's later version, arXiv 2206.05091, corrects the theorem). :func:`to_dp` converts RDP to
(epsilon, delta) with Opacus's conversion."""
from __future__ import annotations

import numpy as np

RCOND = 1e-10       # relative cut-off of the pseudo-inverse of an innovation covariance


def observation(w: np.ndarray, v: int, steps: int) -> np.ndarray:
    """(rows, n): what node v sees of the state after a round's injection: its neighbours'
    messages at gossip steps 0 .. steps-1 and its own model at steps 0 .. steps."""
    n = w.shape[0]
    nbrs = [x for x in np.flatnonzero(w[v] != 0) if x != v]
    rows, power = [], np.eye(n)
    for t in range(steps + 1):
        if t < steps:
            rows += [power[x] for x in nbrs]
        rows.append(power[v])
        power = w @ power
    return np.array(rows)


def _pinv(s: np.ndarray) -> np.ndarray:
    return np.linalg.pinv((s + s.T) / 2, rcond=RCOND, hermitian=True)


def observer_terms(w: np.ndarray, v: int, steps: int, rounds: int, pairs_upto: int = 64) -> np.ndarray:
    """(n,): for every source u, the network bound's coefficient of observer v summed over rounds
    (unit injection noise; the module docstring): round r adds sum_{j,k<=r} |H^r_{jk}| while
    r < ``pairs_upto``, then the larger (sum_j ||S_r^{+1/2} G_{rj}||)^2 (Cauchy-Schwarz: the
    cross terms of any directions, in O(r) a round instead of O(r^2)). One Kalman filter of v's
    view serves every u: its covariances do not depend on u, only the shifts do."""
    n = w.shape[0]
    a = np.linalg.matrix_power(w, steps)                 # W^K: one round's gossip
    o = observation(w, v, steps)
    p = np.zeros((n, n))                                 # covariance of the state's estimate error
    d = np.zeros((n, n, rounds))                         # d[u, :, j]: (true - estimated) state shift by delta_j of u
    total = np.zeros(n)
    idx = np.arange(n)
    for r in range(rounds):
        p = a @ p @ a.T + np.eye(n)                      # predict: W^K, then a fresh unit injection
        d[:, :, :r] = np.einsum("ab,ubj->uaj", a, d[:, :, :r])
        d[idx, idx, r] = 1.0                             # u's round-r injection lands in u's state
        s = o @ p @ o.T                                  # innovation covariance (singular: noise-free views)
        vals, vecs = np.linalg.eigh((s + s.T) / 2)
        keep = vals > RCOND * max(vals.max(), 1e-300)
        root = (vecs[:, keep] / np.sqrt(vals[keep])) @ vecs[:, keep].T          # S^{+1/2}
        g = np.einsum("ka,uaj->ukj", o, d[:, :, :r + 1])                          # innovation shifts
        f = np.einsum("lk,ukj->ulj", root, g)
        if r < pairs_upto:
            total += np.abs(np.einsum("ulj,ulk->ujk", f, f)).sum((1, 2))
        else:
            total += np.linalg.norm(f, axis=1).sum(1) ** 2
        gain = p @ o.T @ (root @ root)
        d[:, :, :r + 1] -= np.einsum("ak,ukj->uaj", gain, g)
        p = p - gain @ o @ p
    return total


def round_terms(w: np.ndarray, u: int, v: int, steps: int, rounds: int) -> np.ndarray:
    """(rounds,) each round's sum_{j,k<=r} |H^r_{jk}| for one pair (the cross terms in full):
    the per-round view of :func:`observer_terms`, for tests and inspection."""
    out = np.zeros(rounds)
    for r in range(rounds):
        out[r] = observer_terms(w, v, steps, r + 1, pairs_upto=rounds)[u] - out[:r].sum()
    return out


def exact_divergence(w: np.ndarray, u: int, v: int, steps: int, rounds: int, shifts: np.ndarray) -> float:
    """alpha-normalised RDP (times 2 sigma^2 / alpha) of v's whole view for FIXED shifts of u's
    injections (``shifts`` (rounds,)), computed directly: the view's matrix over all injections,
    its mean shift against its covariance (pseudo-inverse). For tests: the bound is at least this."""
    n = w.shape[0]
    a = np.linalg.matrix_power(w, steps)
    o = observation(w, v, steps)
    blocks = []
    for r in range(rounds):                              # round r's view of injection j <= r: O (W^K)^(r-j)
        row = [o @ np.linalg.matrix_power(a, r - j) if j <= r else np.zeros_like(o) for j in range(rounds)]
        blocks.append(np.hstack(row))
    m = np.vstack(blocks)                                # (rows x rounds, n x rounds)
    shift = m[:, [j * n + u for j in range(rounds)]] @ shifts
    return float(shift @ np.linalg.pinv(m @ m.T, rcond=RCOND, hermitian=True) @ shift)


WORK_LIMIT = 2e10     # flops of the exact computation above which the local bound is reported instead


def pairwise_share(w: np.ndarray, steps: int, rounds: int = 1) -> tuple[np.ndarray, str]:
    """((n, n): [u, v] the network bound's coefficient, alpha / (2 sigma^2) times it being
    eps_{u->v}(alpha), clamped at ``rounds`` (u's local RDP), the diagonal ``rounds``; which bound
    it is). Past WORK_LIMIT (many nodes and rounds) every pair gets the local coefficient."""
    n = w.shape[0]
    share = np.full((n, n), float(rounds))
    if n ** 4 * rounds ** 2 > WORK_LIMIT:
        return share, (f"local RDP (no network amplification claimed): the exact computation for {n} nodes x "
                       f"{rounds} rounds is past its work limit")
    for v in range(n):
        share[:, v] = np.minimum(float(rounds), observer_terms(w, v, steps, rounds))
    share[np.arange(n), np.arange(n)] = rounds
    how = ("the observer's whole view as one linear Gaussian mechanism (Kalman innovations, pseudo-inverses), "
           "composed adaptively over rounds; cross terms in full for the first 64 rounds, by Cauchy-Schwarz after; "
           "at most the local RDP (privacy/network.py)")
    return share, how


def rdp_orders() -> np.ndarray:
    from opacus.accountants.rdp import RDPAccountant
    return np.array(RDPAccountant.DEFAULT_ALPHAS, dtype=float)


def to_dp(rdp_per_alpha: float, delta: float) -> float:
    """epsilon at ``delta`` of a mechanism with eps(alpha) = rdp_per_alpha * alpha (a Gaussian's
    RDP curve), by Opacus's conversion over its default orders; never below 0."""
    from opacus.accountants.analysis.rdp import get_privacy_spent
    orders = rdp_orders()
    if rdp_per_alpha <= 0:
        return 0.0
    eps, _ = get_privacy_spent(orders=orders, rdp=orders * rdp_per_alpha, delta=delta)
    return max(0.0, float(eps))


def network_epsilons(w: np.ndarray, gossip_steps: int, sigma: float, rounds: int, delta: float,
                     sensitivity: float = 1.0) -> tuple[np.ndarray, float, str]:
    """((n, n) pairwise epsilon_{u->v} at ``delta`` after ``rounds`` rounds of one injection and
    ``gossip_steps`` gossip steps (the diagonal: u's own local DP), the local DP epsilon of the same
    noise without subsampling amplification (what the network bound is compared with), which bound
    it is (:func:`pairwise_share`))."""
    if rounds == 0:
        n = w.shape[0]
        return np.zeros((n, n)), 0.0, "no private round ran"
    share, how = pairwise_share(w, gossip_steps, rounds)
    per_alpha = sensitivity ** 2 / (2 * sigma ** 2)
    values = {s: to_dp(per_alpha * s, delta) for s in np.unique(np.round(share, 12))}
    eps = np.vectorize(lambda s: values[s])(np.round(share, 12))
    return eps, to_dp(per_alpha * rounds, delta), how
