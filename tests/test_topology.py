"""Topology builders: degrees, connectivity, symmetry, and errors that name the option."""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from vecgossip.network.mixing import adjacency, spectral_gap, uniform_mixing
from vecgossip.network.topology import build, check_graph, random_regular


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
    (dict(name="regular", n=9, k=3), "topology.n x topology.k must be even"),
    (dict(name="regular", n=-4, k=2), "topology.n"),
    (dict(name="regular", n=10, k=0), "topology.k"),
    (dict(name="ring", n=2), "topology.n"),
    (dict(name="torus", n=10), "topology.name='torus' is unknown; allowed: regular, ring, complete, star, "
                               "grid, exponential, random"),
    (dict(name="grid", n=13), "13 fits no such grid; nearest: 12 \\(3x4\\) or 15 \\(3x5\\)"),
    (dict(name="grid", n=8), "topology.n"),
    (dict(name="random", n=9, k=3), "topology.n x topology.k must be even"),
    (dict(name="random", n=5, k=5), "topology.k"),
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


@pytest.mark.parametrize("n,shape", [(16, (4, 4)), (12, (3, 4)), (100, (10, 10)), (45, (5, 9))])
def test_grid_is_a_torus(n, shape):
    from vecgossip.network.topology import grid_shape
    assert grid_shape(n) == shape
    g = build("grid", n)
    r, c = shape
    assert (g.degrees() == 4).all()
    want = nx.convert_node_labels_to_integers(nx.grid_2d_graph(r, c, periodic=True), ordering="sorted")
    assert nx.is_isomorphic(g.to_networkx(), want)
    e = {tuple(x) for x in g.edges.tolist()}
    for i in range(n):                                 # right and down neighbours, wrapping (row-major)
        row, col = divmod(i, c)
        for j in (row * c + (col + 1) % c, ((row + 1) % r) * c + col):
            assert (min(i, j), max(i, j)) in e


@pytest.mark.parametrize("n", [2, 5, 16, 33])
def test_exponential_links_powers_of_two(n):
    g = build("exponential", n)
    e = {tuple(x) for x in g.edges.tolist()}
    want = set()
    for i in range(n):
        j = 1
        while j < n:
            a, b = i, (i + j) % n
            if a != b:
                want.add((min(a, b), max(a, b)))
            j *= 2
    assert e == want
    check_graph(g)


def test_random_graphs_are_fresh_each_round_and_near_k_regular():
    from vecgossip.network.topology import RandomGraphs
    gs = RandomGraphs(200, 10, 7)
    a, b = gs.at(0), gs.at(1)
    assert not np.array_equal(a.edges, b.edges)
    assert np.array_equal(a.edges, RandomGraphs(200, 10, 7).at(0).edges)
    for g in (a, b):
        d = g.degrees()
        assert d.max() <= 10 and d.mean() > 9.5                 # only a few dropped self-loops / doubles
        assert (g.edges[:, 0] < g.edges[:, 1]).all() and len(np.unique(g.edges, axis=0)) == len(g.edges)


def test_sparse_spectral_gap_matches_dense(monkeypatch):
    from vecgossip.network import mixing
    w = uniform_mixing(build("exponential", 300))
    dense = spectral_gap(w)
    monkeypatch.setattr(mixing, "DENSE_EIG_MAX", 10)            # force scipy's eigsh
    assert mixing.spectral_gap(w) == pytest.approx(dense, abs=1e-8)
    # ring of n: lambda_2 = 1/3 + 2/3 cos(2 pi / n), no negative eigenvalue larger in magnitude
    assert mixing.spectral_gap(uniform_mixing(build("ring", 40))) == pytest.approx(
        1 - (1 / 3 + 2 / 3 * np.cos(2 * np.pi / 40)), abs=1e-8)
