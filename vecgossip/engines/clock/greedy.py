"""The ``greedy`` sharing policy (issue 56): the bandwidth scheduler of sacs-epfl's
decentralized-learning-simulator (``dasklearn/simulation/bandwidth_scheduler.py``, BWScheduler, as
read from its code), so that a paper made with that simulator can be reproduced. Each node has
one limit for each direction (its uplink for what it sends, its downlink for what it receives).

- A new transfer joins its sender's queue of requests; the sender then **schedules**: for each
  queued request in order, it allocates min(sender's free uplink, receiver's free downlink) if
  positive (fixed from then on: never cut back, never re-shared), stopping when its uplink is
  full; a request that gets nothing waits as a pending request at its receiver.
- When a transfer's last byte has left, its receiver tells its other transfers, ongoing then
  pending, in the order they were registered, about the downlink it freed: each sender adds
  min(its free uplink, the receiver's free downlink) to an ongoing transfer, or starts a pending
  one with it; the receiver stops once its downlink is full. Then the finished transfer's sender
  schedules its queue again (its freed uplink goes to waiting requests only, never to its
  ongoing transfers).
- An aborted transfer (a node gone) frees its bandwidth the same way (the receiver's
  notifications, then the sender's queue).

Not max-min fair: a transfer started when its links were busy keeps a small share while links
free up elsewhere (the peer's rounds come out longer than fair sharing's under heterogeneous
links; results/clock_policies_cpu). The simulator counts whole microseconds and bytes; this
counts seconds and bytes as floats."""
from __future__ import annotations

import numpy as np

EPS = 1e-9          # free bandwidth below this fraction of the limit is none


class Greedy:
    """The allocations of the transfers (by id) under BWScheduler's rules; ``uplink`` /
    ``downlink`` (n,) bytes/s."""

    def __init__(self, uplink: np.ndarray, downlink: np.ndarray) -> None:
        self.up, self.down = uplink, downlink
        self.ends: dict[int, tuple[int, int]] = {}       # id -> (sender, receiver)
        self.alloc: dict[int, float] = {}                # ongoing: id -> bytes/s
        self.out_req: dict[int, list[int]] = {}          # sender -> its queued requests
        self.in_req: dict[int, list[int]] = {}           # receiver -> pending requests waiting for it
        self.out_on: dict[int, list[int]] = {}           # sender -> its ongoing transfers
        self.in_on: dict[int, list[int]] = {}            # receiver -> its ongoing transfers
        self.changed: set[int] = set()                   # ids whose rate changed since :meth:`take_changed`

    def _free_out(self, s: int) -> float:
        return self.up[s] - sum(self.alloc[f] for f in self.out_on.get(s, ()))

    def _free_in(self, r: int) -> float:
        return self.down[r] - sum(self.alloc[f] for f in self.in_on.get(r, ()))

    def add(self, fid: int, s: int, r: int) -> None:
        self.ends[fid] = (s, r)
        self.out_req.setdefault(s, []).append(fid)
        self._schedule(s)

    def _schedule(self, s: int) -> None:
        left = self._free_out(s)
        if left <= EPS * self.up[s]:
            return
        for fid in list(self.out_req.get(s, ())):
            r = self.ends[fid][1]
            bw = min(left, self._free_in(r))
            if bw > EPS * min(self.up[s], self.down[r]):
                self._start(fid, bw)
                self.out_req[s].remove(fid)
                left = self._free_out(s)
                if left <= EPS * self.up[s]:
                    break
            elif fid not in self.in_req.setdefault(r, []):
                self.in_req[r].append(fid)

    def _start(self, fid: int, bw: float) -> None:
        s, r = self.ends[fid]
        self.alloc[fid] = bw
        self.changed.add(fid)
        self.out_on.setdefault(s, []).append(fid)
        self.in_on.setdefault(r, []).append(fid)
        if fid in self.in_req.get(r, ()):
            self.in_req[r].remove(fid)

    def done(self, fid: int) -> None:
        """Its last byte left (or it was aborted): free its bandwidth, as BWScheduler does."""
        s, r = self.ends.pop(fid)
        if fid in self.alloc:
            self.out_on[s].remove(fid)
            self.in_on[r].remove(fid)
            del self.alloc[fid]
            self.changed.add(fid)
            for other in self.in_on.get(r, []) + self.in_req.get(r, []):     # the receiver's notifications
                self._inform(other)
                if self._free_in(r) <= EPS * self.down[r]:
                    break
        else:                                                                  # still a request
            self.out_req[s].remove(fid)
            if fid in self.in_req.get(r, ()):
                self.in_req[r].remove(fid)
        self._schedule(s)

    def _inform(self, fid: int) -> None:
        s, r = self.ends[fid]
        bw = min(self._free_out(s), self._free_in(r))
        if bw <= EPS * min(self.up[s], self.down[r]):
            return
        if fid in self.alloc:
            self.alloc[fid] += bw
            self.changed.add(fid)
        elif fid in self.out_req.get(s, ()):
            self._start(fid, bw)
            self.out_req[s].remove(fid)

    def rate(self, fid: int) -> float:
        return self.alloc.get(fid, 0.0)

    def take_changed(self) -> np.ndarray:
        """The ids (sorted) whose rate changed since the last call: only their rates need reading."""
        out = np.array(sorted(self.changed), dtype=np.int64)
        self.changed = set()
        return out

    def state(self) -> dict:
        # not ``changed``: empty between sharings (Transfers reads every change in the sharing that made it)
        return {k: getattr(self, k) for k in ("ends", "alloc", "out_req", "in_req", "out_on", "in_on")}

    def load(self, d: dict) -> None:
        for k, v in d.items():
            setattr(self, k, {int(a): (list(b) if isinstance(b, list) else b) for a, b in v.items()})
