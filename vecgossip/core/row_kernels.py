"""Fused CPU passes over some rows of the stacked state, where they lie (numba; compiled once and
cached on disk; imported only when the CPU path first needs them).

The tick engine's steps touch only the nodes whose event has come (paper section III-A: a node
trains at its own tick, averages when its buffer is full). A GPU gathers those rows, works on the
(M, P) copy and writes it back. On the CPU these steps are bound by memory bandwidth, and the
gathers and write-backs moved more bytes than the work itself (benchmarks/RESULTS.md, issue 56:
at 1000 nodes they were half the tick engine's host time). These kernels read and write each
touched row once:

- :func:`average_rows`: Eq. 1, new = beta own + (1 - beta) mean(buffer), into the rows, their
  buffer sums emptied in the same pass;
- :func:`momentum_rows`: one parameter's momentum SGD step, v = momentum v + g + decay w;
  w -= lr v (:func:`vecgossip.core.optim.momentum_sgd_` with g = s grad, decay = s wd), each row's
  sum of the new weights added to ``sums`` while the row is in cache (the divergence guard's).

Rows are split over numba's threads, a row wholly in one thread, so every number is independent of
the thread count. The arithmetic is in the arrays' dtype, in the order written (no fast-math on the
updates; only the guard's sums may be reassociated, where only their finiteness is read).
"""
from __future__ import annotations

import numpy as np

from vecgossip.core.jit import nb   # numba on its own thread pool (core/jit.py)


@nb.njit(parallel=True, cache=True)
def average_rows(theta, total, count, rows, beta, u):                              # pragma: no cover (numba)
    """Eq. 1 on ``rows`` of theta (N, P): theta[r] = lerp(total[r] / count[r], theta[r], beta), u = 1 - beta
    (both in theta's dtype), then total[r] = 0. torch.lerp's two-sided form, as the GPU's path
    (:func:`vecgossip.engines.tick.buffer.eq1_average`): mean + beta (own - mean) for beta < 1/2,
    else own - (own - mean) u; beta = 0 (take the mean) gives the mean exactly."""
    p = theta.shape[1]
    small = beta < 0.5
    for i in nb.prange(rows.shape[0]):
        r = rows[i]
        c = count[r]
        if small:
            for k in range(p):
                mean = total[r, k] / c
                theta[r, k] = mean + beta * (theta[r, k] - mean)
                total[r, k] = 0
        else:
            for k in range(p):
                own = theta[r, k]
                theta[r, k] = own - (own - total[r, k] / c) * u
                total[r, k] = 0


@nb.njit(fastmath={"reassoc"}, cache=True)
def _segment_sum(x, lo, hi, acc):                                                  # pragma: no cover (numba)
    """acc + x[lo:hi].sum(), in acc's dtype (the state's: a float32 sum overflows to inf past ~1e38,
    which the divergence guard counts as diverged, as torch's row sum does)."""
    for k in range(lo, hi):
        acc += x[k]
    return acc


@nb.njit(parallel=True, cache=True)
def momentum_rows(w, v, rows, start, g, decay, momentum, lr, sums):               # pragma: no cover (numba)
    """One parameter's columns [start, start + n) of ``rows`` of w and v (N, P): v = momentum v +
    g[i] + decay[i] w; w -= lr v, with g (M, n) the row's scaled gradient, decay (M,); a momentum of
    0 never reads v (as BLAS with beta = 0). sums[i] += the row's new weights' sum (sums in w's dtype)."""
    n = g.shape[1]
    for i in nb.prange(rows.shape[0]):
        r = rows[i]
        d = decay[i]
        if momentum == 0:
            for k in range(n):
                x = g[i, k] + d * w[r, start + k]
                v[r, start + k] = x
                w[r, start + k] -= lr * x
        else:
            for k in range(n):
                x = momentum * v[r, start + k] + g[i, k] + d * w[r, start + k]
                v[r, start + k] = x
                w[r, start + k] -= lr * x
        sums[i] = _segment_sum(w[r], start, start + n, sums[i])


def scalar(x: float, like: np.ndarray):
    """``x`` in ``like``'s dtype, so that the kernels compute in it (a Python float would be float64)."""
    return like.dtype.type(x)
