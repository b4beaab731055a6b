"""An asynchronous server in virtual seconds (issue 55: FedBuff, Nguyen et al., AISTATS 2022,
Algorithm 1): ``concurrency`` clients are in flight at once; a client dispatched at a time the
server holds version v of the model downloads it (``size`` bytes over the server's uplink and its
own downlink), computes its local work (``compute[i]`` seconds), and uploads ``size`` bytes; the
server reads uploads in the order they arrive. :meth:`Dispatcher.round` runs the clock until the
next ``buffer`` uploads have arrived: the server then steps (version v + 1).

Who is dispatched when: at time 0 and after each step the server fills its ``concurrency`` slots;
each arrival frees one, filled at once. A new client is drawn uniformly among the idle clients that
are neither already dispatched at the current version nor arrived since the last step (so a
client trains at most once from one version and uploads at most once a step: its work is one row
of the stacked state); a slot with nobody eligible waits for the next arrival or step. The
schedule depends on times only, never on the models, so the engine trains every client dispatched
at version v in one batch from version v's model (exact: a client's work depends on its start
model and its own data alone) before the server's step uses the uploads.

Equal times: deliveries in the order their transfers started; a round stops at its ``buffer``-th
upload, later deliveries at that instant belonging to the next round."""
from __future__ import annotations

import numpy as np

from vecgossip.engines.clock.events import Heap
from vecgossip.engines.clock.transfers import Transfers


class Dispatcher:
    """``compute`` (m,) seconds of each client's local work; ``uplink`` / ``downlink`` (m + 1,)
    bytes/s, the server's last; ``latency`` seconds one way to the server; ``size`` bytes a model;
    ``rng``: the draws of who is dispatched (checkpointed)."""

    def __init__(self, compute: np.ndarray, uplink: np.ndarray, downlink: np.ndarray, latency: float, policy: str,
                 size: float, concurrency: int, rng: np.random.Generator) -> None:
        self.m = compute.size
        self.compute, self.latency, self.size, self.concurrency, self.rng = compute, latency, size, concurrency, rng
        self.flow = Transfers(uplink, downlink, policy)
        self.heap = Heap()                                 # compute ends: the uploads due
        self.version = np.full(self.m, -1, np.int64)      # the version each client in flight trains from
        self.blocked = np.zeros(self.m, dtype=bool)       # dispatched at this version or arrived since the step
        self.pending: list[int] = []                      # dispatched at the current version, in order
        self.v = 0
        self.started = False
        self.downloads = self.uploads = 0                 # delivered in the last round

    def _fill(self) -> None:
        """Fill free slots at :attr:`flow.now` with eligible idle clients (ascending)."""
        free = self.concurrency - int((self.version >= 0).sum())
        eligible = np.flatnonzero((self.version < 0) & ~self.blocked)
        if free <= 0 or not eligible.size:
            return
        pick = np.sort(self.rng.choice(eligible, min(free, eligible.size), replace=False))
        self.version[pick], self.blocked[pick] = self.v, True
        self.pending.extend(pick.tolist())
        self.flow.start(np.full(pick.size, self.m), pick, self.size, self.latency, pick)

    def round(self, buffer: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Run until ``buffer`` more uploads have arrived; returns (the clients dispatched at the
        current version, ascending: they train from its model; the clients whose uploads arrived,
        in arrival order; the version each trained from). The server then steps."""
        self.downloads = self.uploads = 0
        if not self.started:
            self.started = True
            self._fill()
        arrived, versions = [], []
        f, m = self.flow, self.m
        while len(arrived) < buffer:
            t = min(self.heap.peek(), f.next_event())
            if not np.isfinite(t):
                raise RuntimeError("the asynchronous server waits for uploads that never come")
            f.advance(t)
            got = f.delivered()
            done = []
            for k in got:
                i = int(f.tag[k])
                done.append(k)
                if i < m:                                          # a download: compute, then upload
                    self.downloads += 1
                    self.heap.push(t + float(self.compute[i]), "upload", i)
                    continue
                arrived.append(i - m)
                versions.append(int(self.version[i - m]))
                self.version[i - m] = -1
                self.uploads += 1
                if len(arrived) == buffer:
                    break
                self._fill()
            f.remove(np.asarray(done, np.int64))
            if len(arrived) == buffer:
                break
            if self.heap.peek() <= f.now:
                for ev in self.heap.wave(0.0):
                    f.start(ev.node, m, self.size, self.latency, m + ev.node)
        trains = np.array(sorted(self.pending), np.int64)
        self.pending, self.v = [], self.v + 1
        self.blocked[:] = False
        self.blocked[self.version >= 0] = True        # in flight: not eligible until it arrives
        self._fill()
        return trains, np.asarray(arrived, np.int64), np.asarray(versions, np.int64)

    @property
    def now(self) -> float:
        return self.flow.now

    def state(self) -> dict:
        return {"flow": self.flow.state(), "heap": self.heap.state(), "version": self.version.copy(),
                "blocked": self.blocked.copy(), "pending": list(self.pending), "v": self.v, "started": self.started,
                "rng": self.rng.bit_generator.state}

    def load(self, d: dict) -> None:
        self.flow.load(d["flow"])
        self.heap = Heap.load(d["heap"])
        self.version, self.blocked = np.array(d["version"]), np.array(d["blocked"])
        self.pending, self.v, self.started = list(d["pending"]), int(d["v"]), bool(d["started"])
        self.rng.bit_generator.state = d["rng"]
