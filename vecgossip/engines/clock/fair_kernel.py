"""The max-min fair allocation of :func:`vecgossip.engines.clock.transfers.fair_rates` as one
compiled loop (numba, compiled once and cached on disk): the same progressive filling, the same
floating-point operations in the same order, so the same bits as the array version it replaced
(tests/test_clock_transfers.py checks both on random cases), without numpy's per-call cost on
the few dozen flows and links a re-share touches (it runs at every transfer start and end).
Imported only when a clock first shares links."""
from __future__ import annotations

import numba as nb
import numpy as np


@nb.njit(cache=True)
def fair_fill(up: np.ndarray, down: np.ndarray, left: np.ndarray, rel: float) -> np.ndarray:
    """(F,) rates of flows using links ``up[f]`` and ``down[f]`` (indices into ``left``, the
    links' capacities, modified): every unfrozen flow's rate rises by the smallest fair share
    left on any link it uses; the links within ``rel`` of that share fill and freeze their flows."""
    f = up.size
    nlinks = left.size
    rate = np.zeros(f)
    alive = np.ones(f, dtype=np.bool_)
    use = np.zeros(nlinks, dtype=np.int64)
    full = np.zeros(nlinks, dtype=np.bool_)
    share = np.empty(nlinks)
    live = f
    level = 0.0
    while live > 0:
        use[:] = 0
        for k in range(f):
            if alive[k]:
                use[up[k]] += 1
                use[down[k]] += 1
        inc = np.inf
        for j in range(nlinks):
            if use[j] > 0:
                share[j] = left[j] / use[j]
                if share[j] < inc:
                    inc = share[j]
        if not np.isfinite(inc):                  # no limit left on any live flow
            for k in range(f):
                if alive[k]:
                    rate[k] = np.inf
            break
        level += inc
        bound = inc * (1 + rel)
        for j in range(nlinks):
            full[j] = False
            if use[j] > 0:
                left[j] -= inc * use[j]
                if share[j] <= bound:
                    full[j] = True
                    left[j] = 0.0
        for k in range(f):
            if alive[k] and (full[up[k]] or full[down[k]]):
                rate[k] = level
                alive[k] = False
                live -= 1
    return rate
