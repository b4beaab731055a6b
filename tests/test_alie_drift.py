"""Why ALIE (z = 10) breaks the coordinate-wise median on the tick clock (issue 58, item 2;
results/byzantine_tick_cpu): isolated without training. Every honest node of a 4-regular graph of
16 (2 Byzantine) merges by the package's median (algorithms/median.py) its own value and its
neighbours', a Byzantine one forging Baruch et al.'s mean - z std of the receiver's honest values
(adversaries/attacks.py's statistics, written out here). The forgery is always below, in every
coordinate, so the median of a receiver with a Byzantine neighbour is one order statistic lower
than the honest median: a bias proportional to the honest spread. Without a source of spread the
values reach consensus and the drift stops; with one (SGD's noise, here a Gaussian of fixed scale
added before every merge, as training does between a node's merges) the spread is restored at every
merge and the drift grows linearly in the number of merges. The tick runs merge 200 times a node
(2000 ticks, T_acq 10), and the drift swamps the model; it is a property of repeated robust merges
under a one-directional in-spread attack, not of the tick clock's code."""
from __future__ import annotations

import networkx as nx
import numpy as np
import torch

from vecgossip.algorithms.median import median

N, D, BYZ, Z = 16, 400, (3, 9), 10.0


def drift(merges: int, noise: float, attack: bool = True, seed: int = 0) -> float:
    """The honest nodes' mean value after ``merges`` rounds of median merges (it starts at 0:
    the mean of N(0, 1) coordinates, recentred), averaged over coordinates."""
    rng = np.random.default_rng(seed)
    g = nx.random_regular_graph(4, N, seed=seed)
    honest = np.array([i for i in range(N) if i not in BYZ])
    x = rng.normal(size=(N, D))
    x -= x[honest].mean(0)
    for _ in range(merges):
        x[honest] += noise * rng.normal(size=(honest.size, D))        # what training does between merges
        new = x.copy()
        for i in honest:
            nb = sorted(g.neighbors(i))
            good = [j for j in nb if j not in BYZ]
            vals = np.vstack([x[i], x[good]])
            forged = vals.mean(0) - Z * vals.std(0, ddof=1) if len(good) else x[i]
            msgs = np.vstack([forged if (j in BYZ and attack) else x[j] for j in nb])
            new[i] = median(torch.from_numpy(x[i][None]), torch.from_numpy(msgs[None]),
                            torch.ones(1, len(nb), dtype=torch.bool)).numpy()[0]
        x = new
    return float(x[honest].mean())


def test_without_attack_the_median_does_not_drift():
    calm, attacked = drift(100, 0.1, attack=False), drift(100, 0.1)
    assert abs(calm) < 0.1 and abs(calm) < 0.05 * abs(attacked)


def test_without_a_source_of_spread_the_alie_drift_stops():
    """Consensus kills the spread ALIE's bias is made of: the drift after 50 and 200 merges agrees."""
    early, late = drift(50, 0.0), drift(200, 0.0)
    assert early < -0.1 and abs(late - early) < 0.02 * abs(early)


def test_with_training_noise_the_alie_drift_grows_linearly_in_merges():
    """Noise of 0.1 before every merge: the honest mean moves down ~linearly, 4x the merges ~4x the
    drift (within 25%), and by 200 merges by many noise scales: the robust rule only slows it."""
    d50, d200 = drift(50, 0.1), drift(200, 0.1)
    assert d50 < 0 and d200 < 0
    assert 3.0 < (d200 - drift(0, 0.1)) / (d50 - drift(0, 0.1)) < 5.0
    assert d200 < -20 * 0.1
