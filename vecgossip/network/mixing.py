"""Sparse graph operators: who sends to whom, as one sparse-matrix multiply.

``adjacency(g)`` is the (N, N) receiver-by-sender 0/1 matrix A (A[i, j] = 1 when j sends to i);
``gather_sum(A, senders, X)`` returns A[:, senders] @ X for the senders' rows X (M, P): every
receiver's sum of the models sent to it this tick, computed as one CSR SpMM instead of a loop.
"""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
import torch

from vecgossip.core.device import upload, with_host
from vecgossip.network.topology import Graph

Tensor = torch.Tensor


def adjacency(g: Graph) -> sp.csc_matrix:
    """(N, N) symmetric 0/1 adjacency, CSC so that selecting sender columns is cheap."""
    i, j = g.edges[:, 0], g.edges[:, 1]
    rows = np.concatenate([i, j])
    cols = np.concatenate([j, i])
    a = sp.coo_matrix((np.ones(rows.size, dtype=np.float32), (rows, cols)), shape=(g.n, g.n))
    return a.tocsc()


def to_torch_csr(a: sp.spmatrix, device: torch.device | str, dtype: torch.dtype = torch.float32) -> Tensor:
    """``a`` as a torch CSR tensor on ``device``, its three arrays uploaded without blocking the
    host (:func:`vecgossip.core.device.upload`) and built there with no check of its invariants
    (scipy's CSR is valid), so that making a tick's operator reads nothing back."""
    a = a.tocsr()
    with warnings.catch_warnings():  # "sparse CSR support is in beta": we use only SpMM
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(upload(a.indptr, device, torch.int64), upload(a.indices, device, torch.int64),
                                       upload(a.data, device, dtype), size=a.shape, check_invariants=False)


def padded_csr(columns: Tensor, values: Tensor, n: int) -> Tensor:
    """(r, n) CSR from r rows of d (column, value) pairs each, ``columns`` and ``values`` (r, d)
    on one device (a padded neighbourhood: a padding entry has value 0)."""
    r, d = columns.shape
    with warnings.catch_warnings():  # "sparse CSR support is in beta": we use only SpMM
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(torch.arange(0, r * d + 1, max(d, 1), device=columns.device)[:r + 1],
                                       columns.reshape(-1), values.reshape(-1), size=(r, n))


DENSE_ABOVE = 0.05  # density above which a dense GEMM beats CSR SpMM (benchmarks/mixing.py, CPU)


class SendOperator:
    """Precomputed A plus column selection for the senders of one tick.

    The full operator is CSR, or dense when the graph is dense enough that one GEMM is faster
    (the density threshold DENSE_ABOVE, measured: benchmarks/mixing.py, RESULTS.md).
    """

    def __init__(self, a: sp.spmatrix, device: torch.device | str, dense: bool | None = None,
                 dtype: torch.dtype = torch.float32) -> None:
        """``a`` (receivers, N): all of A, or a shard's receiver rows (shard.py) with ``dense``, the
        choice made for the whole A, so that every shard computes what one process does; ``dtype``:
        the state's (float32 in runs, float64 in the tests' twins)."""
        self.a = a.tocsc()
        self.n = a.shape[0]
        self.device, self.dtype = device, dtype
        if dense is None:
            dense = self.a.nnz / max(1, a.shape[0] * a.shape[1]) > DENSE_ABOVE
        self.dense = bool(dense)
        self.full = (torch.from_numpy(self.a.toarray()).to(device, dtype) if self.dense
                     else to_torch_csr(self.a, device, dtype))
        counts = np.asarray(self.a.sum(1), dtype=np.float64).ravel()
        self.full_counts = with_host(upload(counts, device, dtype), counts)   # on the device, with its host copy

    def select(self, senders: np.ndarray | None) -> tuple[Tensor, np.ndarray | Tensor]:
        """(A[:, senders] as a torch operator (N, M), received-model count per receiver (N,): on
        the host, or for every sender the device's copy kept with its host copy
        (:func:`~vecgossip.core.device.with_host`)). ``senders=None`` means every node sends.
        Made on the host and uploaded without blocking: no read of the device; every sender's
        operator uploads nothing at all (a CUDA graph replays it)."""
        if senders is None:
            return self.full, self.full_counts
        sub = self.a[:, senders]
        counts = np.asarray(sub.sum(1), dtype=np.float64).ravel()
        return to_torch_csr(sub, self.device, self.dtype), counts

    def edges(self, senders: np.ndarray | None) -> tuple[Tensor, Tensor]:
        """The links out of ``senders`` (None = all) as (receiver (E,), sender (E,)) indices."""
        recv, send = link_list(self.a, senders)
        return torch.from_numpy(recv).to(self.device), torch.from_numpy(send).to(self.device)


def link_list(a: sp.csc_matrix, senders: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The links out of ``senders`` (None = all) of a receiver-by-sender CSC matrix, as (receiver,
    sender) int64 arrays, sender by sender in ascending order (the order compressed sends draw in)."""
    sub = a if senders is None else a[:, senders]
    coo = sub.tocoo()
    cols = coo.col if senders is None else np.asarray(senders)[coo.col]
    return coo.row.astype(np.int64), cols.astype(np.int64)


DETERMINISTIC = {"on": False}   # deterministic=true: sparse products without atomics (set by sim.run)
ROW_BUDGET = 1 << 26             # elements of the (chunk, P) gather in the deterministic product


def set_deterministic(on: bool) -> None:
    DETERMINISTIC["on"] = bool(on)


def csr_addmm_(out: Tensor, a: Tensor, x: Tensor, beta: float = 1.0) -> Tensor:
    """out = beta out + A @ x for a CSR A without cuSPARSE's SpMM (whose CUDA kernels may add in a
    varying order): the nonzeros, in CSR order, gathered ``ROW_BUDGET`` elements at a time and added
    with index_add_, which torch runs deterministically under use_deterministic_algorithms."""
    if beta == 0.0:
        out.zero_()
    elif beta != 1.0:
        out.mul_(beta)
    crow, col, val = a.crow_indices(), a.col_indices(), a.values()
    rows = torch.repeat_interleave(torch.arange(a.shape[0], device=col.device), crow[1:] - crow[:-1])
    step = max(1, ROW_BUDGET // max(1, x.shape[1]))
    for lo in range(0, col.numel(), step):
        sl = slice(lo, lo + step)
        out.index_add_(0, rows[sl], x.index_select(0, col[sl]) * val[sl].unsqueeze(1).to(x.dtype))
    return out


ROW_PANEL = 8   # dense W x: rows computed in whole panels of this many (dense_rows_mm)


def dense_rows_mm(out: Tensor, a: Tensor, x: Tensor) -> Tensor:
    """out = A @ x for a dense A (r, m), every row computed in a whole panel of ROW_PANEL rows, so
    that a row's numbers do not depend on how many rows are computed with it (a shard's rows of W,
    shard.py, against one process's whole W). MKL's sgemm rounds the rows of a short last panel
    differently (measured on a 2-core AMD EPYC, AVX2: rows 0-2 of W (7, 7) @ X differ in the last
    bits from rows 0-2 of W[:3] @ X, while with the rows padded to a multiple of 4 or 8 every
    subset of rows equals the whole). The rows past the last whole panel go through a
    zero-padded (ROW_PANEL, m) copy of them: one extra (ROW_PANEL, P) product at most."""
    r = a.shape[0]
    body = r - r % ROW_PANEL
    if body:
        torch.mm(a[:body], x, out=out[:body])
    if body < r:
        pad = a.new_zeros(ROW_PANEL, a.shape[1])
        pad[:r - body] = a[body:]
        out[body:] = (pad @ x)[:r - body]
    return out


def mix_(out: Tensor, w: Tensor, x: Tensor) -> Tensor:
    """out = W x for a mixing operator W (rows of it, on a shard), dense or CSR: a dense W row by
    whole panels (:func:`dense_rows_mm`), a CSR W through :func:`addmm_`."""
    if w.layout == torch.strided:
        return dense_rows_mm(out, w, x)
    return addmm_(out, w, x, beta=0.0)


def addmm_(out: Tensor, a: Tensor, x: Tensor, beta: float = 1.0) -> Tensor:
    """out = beta out + A @ x, A dense or CSR; the deterministic product for CSR when asked."""
    if DETERMINISTIC["on"] and a.layout == torch.sparse_csr:
        return csr_addmm_(out, a, x, beta)
    return out.addmm_(a, x, beta=beta)


def gather_sum(a_sub: Tensor, x: Tensor) -> Tensor:
    """(N, M) sparse (or dense) @ (M, P) -> (N, P): per receiver, the sum of the models sent to it."""
    if a_sub.layout == torch.strided:
        return a_sub @ x
    return addmm_(x.new_empty(a_sub.shape[0], x.shape[1]), a_sub, x, beta=0.0)


def gather_sum_into(out: Tensor, a_sub: Tensor, x: Tensor) -> Tensor:
    """out (N, P) += A_sub @ x in place (A_sub CSR or dense): no (N, P) temporary."""
    return addmm_(out, a_sub, x)


def uniform_mixing(g: Graph) -> sp.csr_matrix:
    """Symmetric doubly stochastic W with weight 1/(deg+1) on the closed neighbourhood
    (Metropolis-Hastings weights min(1/(d_i+1), 1/(d_j+1)), equal to 1/(k+1) on k-regular graphs)."""
    deg = g.degrees()
    i, j = g.edges[:, 0], g.edges[:, 1]
    w = 1.0 / (np.maximum(deg[i], deg[j]) + 1.0)
    off = sp.coo_matrix((np.concatenate([w, w]), (np.concatenate([i, j]), np.concatenate([j, i]))),
                        shape=(g.n, g.n)).tocsr()
    diag = 1.0 - np.asarray(off.sum(1)).ravel()
    return (off + sp.diags(diag)).tocsr()


def directed_mixing(g, kind: str) -> sp.csr_matrix:
    """A digraph's mixing matrix (arcs j -> i): ``row_stochastic``: receiver i averages itself and
    what it receives, W_ij = 1/(in_i + 1); ``column_stochastic`` (push-sum): sender j splits its
    mass over itself and its receivers, P_ij = 1/(out_j + 1) (Assran et al. 2019). On a digraph
    whose every node has in-degree = out-degree = d (directed ring, one-peer exponential) both are
    (I + A)/(d + 1), doubly stochastic."""
    src, dst = g.arcs[:, 0], g.arcs[:, 1]
    if kind == "column_stochastic":
        w = 1.0 / (g.out_degrees() + 1.0)
        off, diag = w[src], w
    else:
        w = 1.0 / (g.in_degrees() + 1.0)
        off, diag = w[dst], w
    return (sp.coo_matrix((off, (dst, src)), shape=(g.n, g.n)) + sp.diags(diag)).tocsr()


DENSE_EIG_MAX = 2000


def spectral_gap(w: sp.spmatrix) -> float:
    """1 - |lambda_2| of a stochastic W, |lambda_2| = the largest eigenvalue magnitude after
    lambda_1 = 1 (governs DFL consensus speed: paper 2's 1 - lambda). Symmetric W: dense eigvalsh
    up to 2000 nodes, scipy's sparse Lanczos (eigsh) beyond; a directed one: dense eigvals."""
    n = w.shape[0]
    if n == 1:
        return 1.0
    if abs(w - w.T).max() > 1e-12:
        mags = np.sort(np.abs(np.linalg.eigvals(w.toarray())))[::-1]
        return float(1.0 - mags[1])
    if n <= DENSE_EIG_MAX:
        mags = np.sort(np.abs(np.linalg.eigvalsh(w.toarray())))[::-1]
        return float(1.0 - mags[1])
    from scipy.sparse.linalg import eigsh
    top = eigsh(w.astype(np.float64), k=2, which="LA", return_eigenvectors=False)   # 1 and lambda_2
    low = eigsh(w.astype(np.float64), k=1, which="SA", return_eigenvectors=False)   # most negative
    return float(1.0 - max(np.sort(top)[0], abs(low[0])))


def mixing_operator(w: sp.spmatrix, device: torch.device | str, dtype: torch.dtype = torch.float32,
                    dense: bool | None = None) -> Tensor:
    """W as a torch operator for x <- W x: dense when dense enough that one GEMM beats CSR SpMM
    (the send operator's measured threshold), else CSR. ``dense``: that choice made for a whole W
    of which ``w`` is a shard's rows (shard.py)."""
    if dense is None:
        dense = w.nnz / max(1, w.shape[0] * w.shape[1]) > DENSE_ABOVE
    if dense:
        return upload(w.toarray(), device, dtype)
    return to_torch_csr(w, device, dtype)


def gossip(w: Tensor, x: Tensor, steps: int = 1, scratch: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Q = ``steps`` gossip steps x <- W x (paper 2: DFedSAM-MGS's multiple gossip steps) on the
    stacked (m, P) models; W (m, m) dense or CSR. Ping-pongs between ``x`` and ``scratch`` (a second
    (m, P) buffer, allocated if None) and returns (result, the other buffer): no allocation per step."""
    out = torch.empty_like(x) if scratch is None else scratch
    for _ in range(steps):
        mix_(out, w, x)
        x, out = out, x
    return x, out


class MixingSchedule:
    """The mixing matrix W_t of every round (paper 2): one W for a static graph, or a new one each
    round from ``graphs.at(t)`` (a topology redrawn per round). An undirected graph gets
    :func:`uniform_mixing` (Metropolis-Hastings, 1/(deg+1) on regular graphs; doubly stochastic,
    so every kind of algorithm takes it); a directed one :func:`directed_mixing` of the kind the
    algorithm needs (``kind``: row_stochastic | column_stochastic; doubly_stochastic is taken
    as row_stochastic, which the config check allows only on balanced digraphs)."""

    def __init__(self, graph=None, graphs=None, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32, weights: sp.csr_matrix | None = None,
                 kind: str = "doubly_stochastic") -> None:
        """``weights``: a given W for the static ``graph`` (a registered topology) in place of
        Metropolis-Hastings."""
        if (graph is None) == (graphs is None):
            raise ValueError("MixingSchedule: give exactly one of graph, graphs")
        self.graph, self.graphs, self.device, self.dtype = graph, graphs, device, dtype
        self.weights, self.kind = weights, kind
        self._static = None
        self.removed = np.zeros(0, dtype=np.int64)

    def remove(self, nodes) -> None:
        """Take nodes out of every later W (isolated after diverging): their edges are dropped, the
        remaining graph gets its Metropolis-Hastings weights, a removed node keeps W_ii = 1."""
        self.removed = np.union1d(self.removed, np.asarray(nodes, dtype=np.int64))
        self._static = None

    def _build(self, g) -> tuple[Tensor, float, sp.csr_matrix]:
        directed = hasattr(g, "arcs")
        if self.removed.size:
            if directed:
                g = type(g)(g.n, g.arcs[~np.isin(g.arcs, self.removed).any(1)])
            else:
                g = Graph(g.n, g.edges[~np.isin(g.edges, self.removed).any(1)])
        if self.weights is not None:   # a given W: removed nodes' links dropped, their weight kept home
            w = self.weights.tolil(copy=True)
            for r in self.removed:
                w[r, :] = 0
                w[:, r] = 0
                w[r, r] = 1.0
            w = w.tocsr()
            w = (w + sp.diags(1.0 - np.asarray(w.sum(1)).ravel())).tocsr()
        elif directed:
            w = directed_mixing(g, "column_stochastic" if self.kind == "column_stochastic" else "row_stochastic")
        else:
            w = uniform_mixing(g)
        return mixing_operator(w, self.device, self.dtype), float(g.degrees().mean()), w

    def at(self, t: int) -> tuple[Tensor, float, sp.csr_matrix]:
        """(W_t as a torch operator, mean messages per node of round t's graph, W_t as scipy CSR)."""
        if self.graphs is not None:
            return self._build(self.graphs.at(t))
        if self._static is None or self._static[0].dtype != self.dtype:   # built again if the dtype changed
            self._static = self._build(self.graph)
        return self._static


class RowMixer:
    """W x for a process's rows of a node-first x (m', *): with one process W's own operator;
    sharded (shard.py), this rank's rows of W (dense or CSR as one process would choose; a lone row
    doubled, see layers.pair) applied to the rows x_j it needs: with a CSR W and
    ``distributed.exchange=all_to_all`` only those with W_ij != 0 for its rows i (a ring: its two
    boundary neighbours), exchanged all_to_all; else every node's (all_gather). Both engines mix
    through it (gossip, an algorithm's ``ctx.mix``); the last W's rows are kept (a static graph's
    W is built once)."""

    def __init__(self, shard, device: torch.device | str, dtype: torch.dtype) -> None:
        self.shard, self.device, self.dtype = shard, device, dtype
        self._local: tuple | None = None        # (W scipy, this rank's rows as a torch operator, plan)

    def __call__(self, w: sp.csr_matrix, x: Tensor, steps: int = 1) -> Tensor:
        """``steps`` products x <- W x on this process's rows ``x`` (m', P); a new tensor."""
        sh = self.shard
        if self._local is None or self._local[0] is not w:
            self._local = (w, *self._operator(w))
        _, op, plan = self._local
        for _ in range(steps):
            if not sh.sharded:
                rows = x
            elif plan is None:
                rows = sh.gather_rows(x, sh.sizes)                             # (m, P)
            else:
                rows = sh.exchange_rows(x, *plan)                              # the columns W needs
            out = x.new_empty(op.shape[0], x.shape[1])
            mix_(out, op, rows)
            x = out[:sh.size] if op.shape[0] != sh.size else out
        return x.contiguous()

    def _operator(self, w: sp.csr_matrix) -> tuple[Tensor, tuple | None]:
        """This rank's rows of W as a torch operator, and the all_to_all plan (None: all_gather)."""
        sh = self.shard
        dense = w.nnz / max(1, w.shape[0] * w.shape[1]) > DENSE_ABOVE
        if not sh.sharded:
            return mixing_operator(w, self.device, self.dtype, dense), None
        rows = w[sh.lo:sh.hi]
        plan = None
        if not dense and sh.exchange == "all_to_all":
            coo = w.tocoo()
            need = np.zeros((sh.world, w.shape[1]), dtype=bool)    # need[r, j]: rank r's rows use x_j
            need[sh.owner(coo.row), coo.col] = True
            cols = np.flatnonzero(need[sh.rank])
            mine = slice(sh.lo, sh.hi)
            plan = ([np.flatnonzero(need[r, mine]) for r in range(sh.world)], sh.counts(cols))
            rows = rows[:, cols]
        if rows.shape[0] == 1:
            rows = sp.vstack([rows, rows]).tocsr()
        return mixing_operator(rows, self.device, self.dtype, dense), plan
