"""The network DP bound of gossip with noise every round (issue 47; vecgossip/privacy/network.py): the
observer's whole view as one linear Gaussian mechanism, composed over rounds.

Checked against: a least-squares reconstruction (where the observer can solve its view for a node's
noisy value, the bound is that node's local DP: the old bound reported 0.98 against 3.21 there),
the exact Renyi divergence of the whole view for fixed shifts computed here by another path (the
view's matrix written out from powers of W, its covariance pseudo-inverted), and cases by hand."""
from __future__ import annotations

import numpy as np
import pytest

from vecgossip.network.mixing import uniform_mixing
from vecgossip.network.topology import build
from vecgossip.privacy.network import network_epsilons, observer_terms, pairwise_share, to_dp


def ring16() -> np.ndarray:
    return uniform_mixing(build("ring", 16)).toarray()


def exp16() -> np.ndarray:
    return uniform_mixing(build("exponential", 16)).toarray()


def view_matrix(w: np.ndarray, v: int, steps: int, rounds: int) -> np.ndarray:
    """v's whole view over ``rounds`` rounds as rows over the injections (round j, node u) at column
    j n + u: in round r, step t, neighbour x's message (W^(t + (r - j) K))_{x u} for j <= r, and
    v's own model at steps 0 .. K likewise. Written here from the definition, independently of the
    package's filter."""
    n = w.shape[0]
    nbrs = [x for x in range(n) if x != v and w[v, x] != 0]
    rows = []
    for r in range(rounds):
        for t in range(steps + 1):
            who = (nbrs if t < steps else []) + [v]
            for x in who:
                row = np.zeros(n * rounds)
                for j in range(r + 1):
                    row[j * n:(j + 1) * n] = np.linalg.matrix_power(w, t + (r - j) * steps)[x]
                rows.append(row)
    return np.array(rows)


def exact(w, u, v, steps, rounds, shifts) -> float:
    """shift^T Sigma^+ shift of v's view for u's injections moved by ``shifts`` (unit noise)."""
    m = view_matrix(w, v, steps, rounds)
    shift = m[:, [j * w.shape[0] + u for j in range(rounds)]] @ shifts
    return float(shift @ np.linalg.pinv(m @ m.T, rcond=1e-10, hermitian=True) @ shift)


def test_a_reconstructable_neighbour_gets_its_local_epsilon():
    """Ring of 16 (weights 1/3), K = 4: node 0 solves its view (its two neighbours' messages and its
    own model) for node 3's noisy value exactly; the reported epsilon 3 -> 0 is then the local one."""
    w = ring16()
    m = view_matrix(w, 0, 4, 1)                                  # (rows, 16): the view of one round
    coef, *_ = np.linalg.lstsq(m.T, np.eye(16)[3], rcond=None)
    assert np.linalg.norm(m.T @ coef - np.eye(16)[3]) < 1e-9    # z_3 = coef . view, exactly
    eps, local, how = network_epsilons(w, 4, 1.0, 1, 1e-5)
    assert eps[3, 0] == pytest.approx(local, rel=1e-9) and local == pytest.approx(to_dp(0.5, 1e-5))
    assert "linear Gaussian" in how
    far = np.linalg.lstsq(m.T, np.eye(16)[8], rcond=None)[0]     # 8 hops away: 4 steps do not reach it
    assert np.linalg.norm(m.T @ far - np.eye(16)[8]) > 0.5 and eps[8, 0] == 0.0


@pytest.mark.parametrize("graph", ["ring", "exponential"])
@pytest.mark.parametrize("steps", [4, 8])
def test_the_bound_is_at_least_the_exact_divergence_on_every_pair(graph, steps):
    """Every ordered pair of a 16-node graph, 1 and 2 rounds, shifts of u's injections in the same
    and in opposite directions: the bound >= the whole view's exact divergence."""
    w = ring16() if graph == "ring" else exp16()
    for rounds, patterns in ((1, [np.ones(1)]), (2, [np.ones(2), np.array([1.0, -1.0]), np.array([0.0, 1.0])])):
        bound = np.stack([observer_terms(w, v, steps, rounds) for v in range(16)], 1)    # [u, v]
        for v in range(16):
            m = view_matrix(w, v, steps, rounds)
            cov = np.linalg.pinv(m @ m.T, rcond=1e-10, hermitian=True)
            for u in range(16):
                if u == v:
                    continue
                cols = m[:, [j * 16 + u for j in range(rounds)]]
                for d in patterns:
                    shift = cols @ d
                    assert bound[u, v] >= shift @ cov @ shift - 1e-6, (graph, steps, rounds, u, v, d)
        if rounds == 1:   # one round, one shift: the bound is the exact divergence (no cross terms)
            u, v = 5, 2
            assert bound[u, v] == pytest.approx(exact(w, u, v, steps, 1, np.ones(1)), abs=1e-7)


def test_by_hand():
    """Star, centre 0 with leaves 1, 2, 3 (Metropolis-Hastings weights 1/4 from the centre, 3/4 at
    a leaf), observer leaf 1, two gossip steps: it sees the centre's z_0, then (z_0 + z_1 + z_2 +
    z_3) / 4, and knows its own z_1: it learns z_2 + z_3. Its view of z_2 is the projection of e_2
    on span(e_0, e_1, e_2 + e_3): 1/2. One step: it sees only z_0: 0. Path 0 - 1 - 2 with one step:
    node 0 sees z_1 (all of it: 1) and nothing of z_2 (0); with two steps node 1's second message
    reveals z_2 given z_0 and z_1 (1)."""
    star = uniform_mixing(build("star", 3)).toarray()
    assert star[0, 1] == 0.25 and star[1, 1] == 0.75
    assert observer_terms(star, 1, 2, 1)[2] == pytest.approx(0.5, abs=1e-12)
    assert observer_terms(star, 1, 1, 1)[2] == pytest.approx(0.0, abs=1e-12)
    path = np.array([[0.5, 0.5, 0.0], [0.5, 0.0, 0.5], [0.0, 0.5, 0.5]])
    one, two = observer_terms(path, 0, 1, 1), observer_terms(path, 0, 2, 1)
    assert one[1] == pytest.approx(1.0) and one[2] == pytest.approx(0.0, abs=1e-12)
    assert two[2] == pytest.approx(1.0)
    share, _ = pairwise_share(path, 2, rounds=3)
    assert share[2, 0] == 3 and share[0, 0] == 3                 # capped at the local RDP of 3 rounds
    eps, local, _ = network_epsilons(star, 2, 1.0, 1, 1e-5)
    assert eps[2, 1] == pytest.approx(to_dp(0.25, 1e-5)) and eps[2, 1] < local


def test_epsilon_is_never_negative():
    """A tiny divergence at a large delta converts to 0, not below (issue 47: delta 0.5 reported -0.69)."""
    assert to_dp(1e-6, 0.5) == 0.0 and to_dp(0.0, 1e-5) == 0.0


def test_long_horizons_stay_bounds():
    """D-PSGD's case (one gossip step a round) over 8 rounds and K = 2 over 6: the bound, with the
    cross terms in full and with Cauchy-Schwarz after round 3, is at least the exact divergence of
    the whole view for 20 sign patterns of u's shifts, every source u of observer 0."""
    w = ring16()
    rng = np.random.default_rng(1)
    for steps, rounds in ((1, 8), (2, 6)):
        full = observer_terms(w, 0, steps, rounds)
        cheap = observer_terms(w, 0, steps, rounds, pairs_upto=3)
        m = view_matrix(w, 0, steps, rounds)
        cov = np.linalg.pinv(m @ m.T, rcond=1e-10, hermitian=True)
        for u in range(1, 16):
            cols = m[:, [j * 16 + u for j in range(rounds)]]
            assert cheap[u] >= full[u] - 1e-9
            for trial in range(20):
                d = rng.choice([-1.0, 1.0], rounds) if trial else np.ones(rounds)
                assert full[u] >= (cols @ d) @ cov @ (cols @ d) - 1e-9
