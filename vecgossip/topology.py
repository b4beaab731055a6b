"""Graph builders -> undirected edge lists (paper section III-A: Regular(N=50, k=8); Fig. 3: Star).

Every builder validates its input and raises ``ValueError`` naming the option and what is allowed.
The result is a :class:`Graph`: node count and a (E, 2) array of undirected edges (i < j).
"""
from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np

TOPOLOGIES = ("regular", "ring", "complete", "star")


@dataclass(frozen=True)
class Graph:
    n: int
    edges: np.ndarray  # (E, 2) int64, undirected, i < j

    def degrees(self) -> np.ndarray:
        return np.bincount(self.edges.ravel(), minlength=self.n)

    def to_networkx(self) -> nx.Graph:
        g = nx.Graph()
        g.add_nodes_from(range(self.n))
        g.add_edges_from(self.edges.tolist())
        return g


def _from_nx(g: nx.Graph) -> Graph:
    e = np.array(sorted((min(a, b), max(a, b)) for a, b in g.edges()), dtype=np.int64).reshape(-1, 2)
    return Graph(g.number_of_nodes(), e)


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or int(value) != value or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def random_regular(n: int, k: int, seed: int, max_tries: int = 100) -> Graph:
    """Random connected simple k-regular graph (networkx, redrawn until connected)."""
    n = _check_int("topology.n (nodes)", n, 2)
    k = _check_int("topology.k (degree)", k, 1)
    if k >= n:
        raise ValueError(f"topology.k (degree) must be < topology.n (nodes): k={k}, n={n}")
    if (n * k) % 2:
        raise ValueError(f"topology: n*k must be even for a k-regular graph, got n={n}, k={k} (n*k={n * k})")
    if k == 1 and n > 2:
        raise ValueError(f"topology.k (degree)=1 cannot give a connected graph of n={n} > 2 nodes; use k >= 2")
    rng = np.random.default_rng(seed)
    for _ in range(max_tries):
        g = nx.random_regular_graph(k, n, seed=int(rng.integers(2**31)))
        if nx.is_connected(g):
            return _from_nx(g)
    raise RuntimeError(f"no connected {k}-regular graph on {n} nodes after {max_tries} draws")


def ring(n: int) -> Graph:
    n = _check_int("topology.n (nodes)", n, 3)
    return _from_nx(nx.cycle_graph(n))


def complete(n: int) -> Graph:
    n = _check_int("topology.n (nodes)", n, 2)
    return _from_nx(nx.complete_graph(n))


def star(n: int) -> Graph:
    """The paper's Star(N) (Fig. 3, Fig. 8a/b): centre node 0 plus n leaves, so n + 1 nodes."""
    n = _check_int("topology.n (leaves)", n, 1)
    return _from_nx(nx.star_graph(n))


def build(name: str, n: int, k: int | None = None, seed: int = 0) -> Graph:
    if name == "regular":
        return random_regular(n, k if k is not None else -1, seed)
    builders = {"ring": ring, "complete": complete, "star": star}
    if name not in builders:
        raise ValueError(f"topology.name={name!r} is unknown; allowed: {', '.join(TOPOLOGIES)}")
    return builders[name](n)


def check_graph(g: Graph) -> None:
    """Invariants every engine relies on: simple, undirected, connected."""
    if len(g.edges) and (g.edges[:, 0] == g.edges[:, 1]).any():
        raise ValueError("graph has self-loops")
    if not nx.is_connected(g.to_networkx()):
        raise ValueError("graph is not connected")
