"""Graph builders -> undirected edge lists (paper 1 section III-A: Regular(N=50, k=8); Fig. 3: Star;
paper 2 (DFedSAM, Appendix A): ring, grid (2-D torus), exponential, fully connected, and a random
graph redrawn every round) and directed ones for push-sum (Assran et al. ICML 2019, SGP): a
directed ring, the one-peer exponential graph (time-varying), random out-degree-k digraphs redrawn
every round.

Every builder validates its input and raises ``ValueError`` naming the option and what is allowed.
The result is a :class:`Graph` (node count and a (E, 2) array of undirected edges, i < j) or a
:class:`Digraph` (node count and (E, 2) arcs sender -> receiver).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Callable, Optional

import networkx as nx
import numpy as np
from vecgossip.core.options import Options, one_of



@dataclass(frozen=True)
class Topology:
    """One entry of the topology registry: how to build it and what it is. Every rule about
    topologies (which engine takes which, which need a degree, which mixing matrices exist) reads
    these properties; nothing tests a topology by its name."""

    build: Callable[..., object]        # (n, k, seed) -> Graph | Digraph: the graph (round 0's if redrawn)
    min_nodes: int = 2                  # the least n it is built on
    degree: bool = False                # takes topology.k (degree)
    directed: bool = False              # arcs sender -> receiver (push-sum); the round engine only
    balanced: bool = False              # directed, every node's in-degree = its out-degree (a doubly stochastic W)
    per_round: bool = False             # a new graph every round: ``at(n, k, seed, t)``; the round engine only
    at: Callable[..., object] | None = None
    hub: bool = False                   # n leaves around one more node (the star): n + 1 nodes
    check: Callable[[int, int | None], object] | None = None   # more rules on (n, k), ValueError naming them
    fixed_n: int | None = None          # registered with a fixed graph or W: only this n
    weights: object = None              # registered as a fixed mixing matrix W (scipy CSR): no graph
    user: bool = False                  # registered by register_topology

    def nodes(self, n: int) -> int:
        """The nodes of the graph built with ``n``."""
        return n + 1 if self.hub else n


REGISTRY: dict[str, Topology] = {}


def get(name: str) -> Topology:
    """The registry's entry ``name`` (ValueError naming the choices if there is none)."""
    if name not in REGISTRY:
        raise ValueError(f"topology.name={name!r} is unknown; allowed: {', '.join(REGISTRY)}")
    return REGISTRY[name]


def names(where: Callable[[Topology], bool] = lambda t: True) -> tuple[str, ...]:
    """The registered topologies with a property, e.g. ``names(lambda t: t.degree)``."""
    return tuple(n for n, t in REGISTRY.items() if where(t))


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


@dataclass(frozen=True)
class Digraph:
    """A directed graph: ``arcs`` (E, 2) int64 rows (sender, receiver), no self-loops, no duplicates."""

    n: int
    arcs: np.ndarray

    def out_degrees(self) -> np.ndarray:
        return np.bincount(self.arcs[:, 0], minlength=self.n)

    def in_degrees(self) -> np.ndarray:
        return np.bincount(self.arcs[:, 1], minlength=self.n)

    def degrees(self) -> np.ndarray:
        """Messages each node sends (its out-degree)."""
        return self.out_degrees()


def _arcs(n: int, pairs: np.ndarray) -> Digraph:
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    return Digraph(n, np.unique(pairs, axis=0).astype(np.int64).reshape(-1, 2))


def directed_ring(n: int) -> Digraph:
    """Node i sends to i + 1 (mod n)."""
    n = _check_int("topology.n", n, 2)
    i = np.arange(n)
    return _arcs(n, np.stack([i, (i + 1) % n], 1))


def one_peer_exponential(n: int, round_: int) -> Digraph:
    """SGP's time-varying one-peer exponential graph (Assran et al. 2019, section 6): at round t
    node i sends to i + 2^(t mod ceil(log2 n)) (mod n); every node sends and receives one model."""
    n = _check_int("topology.n", n, 2)
    hops = max(1, int(np.ceil(np.log2(n))))
    i = np.arange(n)
    return _arcs(n, np.stack([i, (i + 2 ** (round_ % hops)) % n], 1))


def random_out(n: int, k: int, rng: np.random.Generator) -> Digraph:
    """Every node sends to k distinct others drawn uniformly (one draw of random keys per node)."""
    keys = rng.random((n, n))
    keys[np.arange(n), np.arange(n)] = np.inf                       # never itself
    dst = np.argsort(keys, axis=1)[:, :k]                            # (n, k)
    return _arcs(n, np.stack([np.repeat(np.arange(n), k), dst.ravel()], 1))


@dataclass(frozen=True)
class PerRound:
    """A topology redrawn every round (the round engine): ``at(t)`` is round t's graph, drawn from
    its own stream (seed, t), so it does not depend on what else was drawn."""

    name: str
    n: int
    k: int | None
    seed: int

    def at(self, round_: int):
        return REGISTRY[self.name].at(self.n, self.k, self.seed, round_)


def _from_nx(g: nx.Graph) -> Graph:
    e = np.array(sorted((min(a, b), max(a, b)) for a, b in g.edges()), dtype=np.int64).reshape(-1, 2)
    return Graph(g.number_of_nodes(), e)


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or int(value) != value or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_degree(n: int, k: int, graph: str = "k-regular") -> tuple[int, int]:
    """n and k of a degree-k graph: k < n and n*k even (every edge has two ends)."""
    n = _check_int("topology.n", n, 2)
    k = _check_int("topology.k", k, 1)
    if k >= n:
        raise ValueError(f"topology.k must be < topology.n: k={k}, n={n}")
    if (n * k) % 2:
        raise ValueError(f"topology.n x topology.k must be even for a {graph} graph (every edge has two ends), "
                         f"got {n} x {k} = {n * k}")
    return n, k


def random_regular(n: int, k: int, seed: int, max_tries: int = 100) -> Graph:
    """Random connected simple k-regular graph (networkx, redrawn until connected)."""
    n, k = check_degree(n, k)
    if k == 1 and n > 2:
        raise ValueError(f"topology.k=1 cannot give a connected graph of n={n} > 2 nodes; use k >= 2")
    rng = np.random.default_rng(seed)
    for _ in range(max_tries):
        g = nx.random_regular_graph(k, n, seed=int(rng.integers(2**31)))
        if nx.is_connected(g):
            return _from_nx(g)
    raise RuntimeError(f"no connected {k}-regular graph on {n} nodes after {max_tries} draws")


def ring(n: int) -> Graph:
    n = _check_int("topology.n", n, 3)
    return _from_nx(nx.cycle_graph(n))


def complete(n: int) -> Graph:
    n = _check_int("topology.n", n, 2)
    return _from_nx(nx.complete_graph(n))


def star(n: int) -> Graph:
    """The paper's Star(N) (Fig. 3, Fig. 8a/b): centre node 0 plus n leaves, so n + 1 nodes."""
    n = _check_int("topology.n", n, 1)
    return _from_nx(nx.star_graph(n))


def grid_shape(n: int) -> tuple[int, int]:
    """(r, c) with r * c = n, 3 <= r <= c and r as close to sqrt(n) as possible (a square when n
    is one). Raises ValueError naming the nearest sizes that do form such a torus."""
    n = _check_int("topology.n", n, 9)
    for r in range(int(np.sqrt(n)), 2, -1):
        if n % r == 0:
            return r, n // r
    ok = lambda m: any(m % r == 0 and m // r >= r for r in range(3, int(np.sqrt(m)) + 1))  # noqa: E731
    lo = next(m for m in range(n - 1, 8, -1) if ok(m))
    hi = next(m for m in range(n + 1, 2 * n + 9) if ok(m))
    raise ValueError(f"topology=grid needs topology.n = r x c with 3 <= r <= c (a 2-D torus); "
                     f"{n} fits no such grid; nearest: {lo} ({'x'.join(map(str, grid_shape(lo)))}) or "
                     f"{hi} ({'x'.join(map(str, grid_shape(hi)))})")


def grid(n: int) -> Graph:
    """2-D torus r x c (every node linked to its 4 neighbours, wrapping around), nodes row-major."""
    r, c = grid_shape(n)
    g = nx.convert_node_labels_to_integers(nx.grid_2d_graph(r, c, periodic=True), ordering="sorted")
    return _from_nx(g)


def exponential(n: int) -> Graph:
    """Node i linked to i +- 2^j (mod n) for every 2^j < n (DFedSAM's "exponential" graph)."""
    n = _check_int("topology.n", n, 2)
    i = np.arange(n)
    hops = 2 ** np.arange(int(np.log2(n - 1)) + 1 if n > 1 else 0)
    e = np.stack([np.repeat(i, hops.size), (i[:, None] + hops).ravel() % n], 1)
    return _edges(n, e)


def configuration_graph(n: int, k: int, rng: np.random.Generator) -> Graph:
    """Random graph of degree <= k (the configuration model): n*k stubs paired uniformly at random
    in one shuffle, then self-loops and parallel edges dropped (a few per graph: about (k-1)/2
    self-loops and (k-1)^2/4 double edges in expectation). No Python loop over nodes."""
    stubs = np.repeat(np.arange(n), k)
    rng.shuffle(stubs)
    return _edges(n, stubs.reshape(-1, 2))


def _edges(n: int, pairs: np.ndarray) -> Graph:
    """Undirected simple graph from (E, 2) pairs: self-loops and duplicates removed, i < j, sorted."""
    pairs = np.sort(pairs[pairs[:, 0] != pairs[:, 1]], axis=1)
    return Graph(n, np.unique(pairs, axis=0).astype(np.int64).reshape(-1, 2))


def RandomGraphs(n: int, k: int, seed: int) -> PerRound:
    """``topology=random``: a fresh :func:`configuration_graph` of degree k every round."""
    return PerRound("random", n, k, seed)


def check(name: str, n: int, k: int | None = None) -> None:
    """Raise ValueError (naming the option) unless topology ``name`` can be built on n nodes with
    degree k: without building it, so configs are checked before any work."""
    topo = get(name)
    if topo.fixed_n is not None and n != topo.fixed_n:
        raise ValueError(f"topology={name} has {topo.fixed_n} nodes (registered so): set topology.n={topo.fixed_n}, got {n}")
    if topo.user:
        if topo.weights is None:
            topo.build(n, k, 0)            # built and checked now: simple, connected
        return
    _check_int("topology.n", n, topo.min_nodes)
    if topo.degree:
        _check_int("topology.k", -1 if k is None else k, 1)
    if topo.check is not None:
        topo.check(n, k)


def build(name: str, n: int, k: int | None = None, seed: int = 0):
    """The graph of a topology (one redrawn every round: its round-0 graph)."""
    check(name, n, k)
    return get(name).build(n, k, seed)


def node_count(name: str, n: int) -> int:
    """Nodes of topology ``name`` built with ``n``: a star has its hub besides the n leaves."""
    return get(name).nodes(n)


def check_graph(g: Graph, what: str = "graph") -> None:
    """Invariants every engine relies on: simple, undirected, connected."""
    if len(g.edges) and (g.edges[:, 0] == g.edges[:, 1]).any():
        raise ValueError(f"{what} has self-loops")
    if not nx.is_connected(g.to_networkx()):
        raise ValueError(f"{what} is not connected")


def _graph_of(g, what: str) -> Graph:
    """A networkx graph or an (E, 2) edge list as a :class:`Graph` (undirected, i < j, no duplicates)."""
    if isinstance(g, nx.Graph):
        if g.is_directed():
            raise ValueError(f"{what}: a directed graph; gossip here runs on undirected links (a directed "
                             "mixing matrix W: register_topology(name, weights=W))")
        if sorted(g.nodes()) != list(range(g.number_of_nodes())):
            raise ValueError(f"{what}: nodes must be 0 .. n-1")
        return _from_nx(g)
    e = np.asarray(g)
    if e.ndim != 2 or e.shape[1] != 2 or not np.issubdtype(e.dtype, np.integer) or (e.size and e.min() < 0):
        raise ValueError(f"{what}: give a networkx graph or an (E, 2) array of node indices, got shape {e.shape}")
    if (e[:, 0] == e[:, 1]).any():
        raise ValueError(f"{what} has self-loops")
    return _edges(int(e.max()) + 1 if e.size else 0, e)


def pattern(w) -> Graph:
    """The undirected links of W's off-diagonal nonzeros."""
    coo = w.tocoo()
    off = coo.row != coo.col
    return _graph_of(np.stack([coo.row[off], coo.col[off]], 1).astype(np.int64), "W")


def register_topology(name: str, graph=None, *, weights=None) -> None:
    """Make ``topology=<name>`` (``topology.name=<name>``) a topology of one's own: ``graph`` a
    callable ``(n, seed) -> networkx.Graph | (E, 2) edges`` (any n), or a fixed networkx graph or
    edge list (its n only); or ``weights``, a fixed (n, n) mixing matrix W (scipy sparse or
    dense; row-stochastic, nonnegative; the round engine mixes with it as given, so a W that is
    not doubly stochastic is refused for algorithms that need one). Graphs must be undirected,
    simple and connected; checked now where fixed, at the config check otherwise. ValueError
    naming what is wrong; the built-in names cannot be replaced."""
    import scipy.sparse as sp
    if not isinstance(name, str) or not name.isidentifier() or (name in REGISTRY and not REGISTRY[name].user):
        raise ValueError(f"register_topology: {name!r} must be an identifier and not a built-in topology")
    if (graph is None) == (weights is None):
        raise ValueError("register_topology: give exactly one of graph, weights")
    if weights is not None:
        w = sp.csr_matrix(np.asarray(weights.todense() if sp.issparse(weights) else weights, dtype=np.float64))
        n = w.shape[0]
        if w.ndim != 2 or w.shape != (n, n) or n < 2:
            raise ValueError(f"register_topology: W must be square (n, n), n >= 2, got {w.shape}")
        if w.data.size and (w.data.min() < 0 or not np.isfinite(w.data).all()):
            raise ValueError("register_topology: W must be finite and nonnegative")
        rows = np.asarray(w.sum(1)).ravel()
        if not np.allclose(rows, 1.0, rtol=0, atol=1e-9):
            raise ValueError(f"register_topology: W must be row-stochastic (every row sums to 1); row "
                             f"{int(np.argmax(np.abs(rows - 1)))} sums to {rows[np.argmax(np.abs(rows - 1))]:.6g}")
        if not nx.is_strongly_connected(nx.DiGraph(w)):
            raise ValueError("register_topology: W's graph is not (strongly) connected")
        REGISTRY[name] = Topology(lambda n, k, seed: pattern(w), fixed_n=n, weights=w, user=True)
        return
    if callable(graph):
        REGISTRY[name] = Topology(_user_graph(name, graph), user=True)
        return
    g = _graph_of(graph, f"register_topology({name!r})")
    check_graph(g, f"register_topology({name!r})")
    REGISTRY[name] = Topology(lambda n, k, seed: g, fixed_n=g.n, user=True)


def _user_graph(name: str, make: Callable):
    """A registered ``(n, seed) -> graph`` callable as a builder: its graph checked (simple,
    undirected, connected, n nodes)."""
    def build_it(n: int, k, seed: int) -> Graph:
        g = _graph_of(make(n, seed), f"topology={name}")
        if g.n != n:
            raise ValueError(f"topology={name}: its graph has {g.n} nodes, the run {n}")
        check_graph(g, f"topology={name}")
        return g
    return build_it


def doubly_stochastic(w) -> bool:
    return bool(np.allclose(np.asarray(w.sum(0)).ravel(), 1.0, rtol=0, atol=1e-9))


def _regular_check(n: int, k: int) -> None:
    n, k = check_degree(n, k, "k-regular")
    if k == 1 and n > 2:
        raise ValueError(f"topology.k=1 cannot give a connected graph of n={n} > 2 nodes; use k >= 2")


def _less_than_n(n: int, k: int) -> None:
    if k >= n:
        raise ValueError(f"topology.k must be < topology.n: k={k}, n={n}")


def _random_at(n, k, seed, t):
    return configuration_graph(n, k, np.random.default_rng([seed, t]))


def _random_out_at(n, k, seed, t):
    return random_out(n, k, np.random.default_rng([seed, t]))


REGISTRY.update({
    "regular": Topology(lambda n, k, seed: random_regular(n, k, seed), degree=True, check=_regular_check),
    "ring": Topology(lambda n, k, seed: ring(n), min_nodes=3),
    "complete": Topology(lambda n, k, seed: complete(n)),
    "star": Topology(lambda n, k, seed: star(n), min_nodes=1, hub=True),
    "grid": Topology(lambda n, k, seed: grid(n), min_nodes=1, check=lambda n, k: grid_shape(n)),
    "exponential": Topology(lambda n, k, seed: exponential(n)),
    "random": Topology(lambda n, k, seed: _random_at(n, k, seed, 0), degree=True, per_round=True, at=_random_at,
                       check=lambda n, k: check_degree(n, k, "random (stubs are paired)")),
    "directed_ring": Topology(lambda n, k, seed: directed_ring(n), directed=True, balanced=True),
    "one_peer_exponential": Topology(lambda n, k, seed: one_peer_exponential(n, 0), directed=True, balanced=True,
                                     per_round=True, at=lambda n, k, seed, t: one_peer_exponential(n, t)),
    "random_out": Topology(lambda n, k, seed: _random_out_at(n, k, seed, 0), degree=True, directed=True,
                           per_round=True, at=_random_out_at, check=_less_than_n),
})
BUILT_IN = tuple(REGISTRY)


class TopologyConfig(Options):
    """The ``topology`` group (``conf/topology/*.yaml``): a registered topology on ``n`` nodes."""

    name: Annotated[str, one_of(lambda: REGISTRY)] = "regular"   # a built-in topology or one of register_topology
    n: int = 50                           # nodes (tick engine; a star: leaves) or clients (round engine)
    k: Optional[int] = 8                  # degree, for the topologies that take one (regular, random, random_out)

    def check(self) -> None:
        """ValueError (naming the option) unless this topology can be built on ``n`` nodes with
        degree ``k`` (checked by config/rules.py: a server algorithm builds no graph)."""
        check(self.name, self.n, self.k)

    @property
    def entry(self) -> Topology:
        return REGISTRY[self.name]

    @property
    def nodes(self) -> int:
        """The graph's nodes (a star has its hub besides the n leaves)."""
        return self.entry.nodes(self.n)
