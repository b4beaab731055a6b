"""Topology builders: degrees, connectivity, symmetry, and errors that name the option."""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from vecgossip.mixing import adjacency, spectral_gap, uniform_mixing
from vecgossip.topology import build, check_graph, random_regular


@pytest.mark.parametrize("n,k", [(50, 8), (1000, 32), (10, 3)])
def test_random_regular(n, k):
    g = random_regular(n, k, seed=0)
    assert (g.degrees() == k).all()
    assert nx.is_connected(g.to_networkx())
    a = adjacency(g)
    assert (a != a.T).nnz == 0 and a.diagonal().sum() == 0
    check_graph(g)
    assert np.array_equal(random_regular(n, k, seed=0).edges, g.edges)  # seeded


def test_ring_complete_star():
    assert (build("ring", 7).degrees() == 2).all()
    assert (build("complete", 6).degrees() == 5).all()
    s = build("star", 50)  # the paper's Star(50): centre + 50 leaves
    assert s.n == 51
    assert s.degrees()[0] == 50 and (s.degrees()[1:] == 1).all()


@pytest.mark.parametrize("kwargs,match", [
    (dict(name="regular", n=10, k=10), "topology.k"),
    (dict(name="regular", n=9, k=3), "n\\*k must be even"),
    (dict(name="regular", n=-4, k=2), "topology.n"),
    (dict(name="regular", n=10, k=0), "topology.k"),
    (dict(name="ring", n=2), "topology.n"),
    (dict(name="torus", n=10), "topology.name='torus' is unknown; allowed: regular, ring, complete, star"),
])
def test_bad_inputs_name_the_option(kwargs, match):
    with pytest.raises(ValueError, match=match):
        build(**kwargs)


def test_uniform_mixing_doubly_stochastic_and_gap():
    for g in (random_regular(20, 4, 0), build("ring", 8), build("star", 6)):
        w = uniform_mixing(g).toarray()
        np.testing.assert_allclose(w.sum(0), 1)
        np.testing.assert_allclose(w.sum(1), 1)
        np.testing.assert_allclose(w, w.T)
        assert (w >= 0).all()
    # ring of 8 with weights 1/3: eigenvalues 1/3 + 2/3 cos(2 pi j / 8); lambda_2 = 1/3 + 2/3 cos(pi/4)
    gap = spectral_gap(uniform_mixing(build("ring", 8)))
    assert gap == pytest.approx(1 - (1 / 3 + 2 / 3 * np.cos(np.pi / 4)))
