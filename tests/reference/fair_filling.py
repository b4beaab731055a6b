"""Max-min fair sharing by progressive filling from scratch (issue 48's allocation, as arrays): the
reference the clock's incremental sharing (vecgossip/engines/clock/maxmin.py) is compared with
(tests/test_clock_maxmin.py), itself checked by hand and for the max-min property
(tests/test_clock_parts.py)."""
from __future__ import annotations

import numpy as np


def fair_rates(sender, receiver, uplink, downlink, rel=1e-12):
    """(F,) max-min fair rates of F flows, flow f using ``uplink[sender[f]]`` and
    ``downlink[receiver[f]]`` (bytes/s, ``inf`` allowed), by progressive filling from scratch: every
    unfrozen flow's rate rises by the smallest fair share left on any link it uses; the links that
    fill freeze their flows."""
    sender, receiver = np.asarray(sender, np.int64), np.asarray(receiver, np.int64)
    uplink, downlink = np.asarray(uplink, float), np.asarray(downlink, float)
    f = sender.size
    rate = np.zeros(f)
    n = max(uplink.size, downlink.size)
    left = np.concatenate([uplink, np.full(n - uplink.size, np.inf), downlink, np.full(n - downlink.size, np.inf)])
    ids, up, down, level = np.arange(f), sender.astype(np.int64), n + receiver.astype(np.int64), 0.0
    while ids.size:
        use = np.bincount(up, minlength=2 * n) + np.bincount(down, minlength=2 * n)
        busy = use > 0
        share = np.full(2 * n, np.inf)
        share[busy] = left[busy] / use[busy]
        inc = share.min()
        if not np.isfinite(inc):
            rate[ids] = np.inf
            break
        level += inc
        left[busy] -= inc * use[busy]
        full = busy & (share <= inc * (1 + rel))
        left[full] = 0.0
        frozen = full[up] | full[down]
        rate[ids[frozen]] = level
        ids, up, down = ids[~frozen], up[~frozen], down[~frozen]
    return rate
