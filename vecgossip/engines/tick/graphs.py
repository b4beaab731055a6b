"""``engine.cuda_graphs``: a synchronous tick's device work as one CUDA graph (issue 46).

When every node acts at the same ticks (a fixed T_acq) and the tick's work has static shapes and
reads nothing back (plain gossip and VC: every node draws a batch, takes one Caffe SGD step, sends
its model along every link by one sparse product, and averages by Eq. 1 with or without Algorithm
3), the device work of such a tick is the same kernels on the same buffers every T_acq ticks. It
is captured once, after WARM eager ticks, and replayed: one launch a tick instead of ~160
(benchmarks/launches.py). The host keeps doing the host's part each tick (the schedule; the
buffers' host counts come back to zero within the tick; the divergence guard's watch is read at
its own ticks). Random draws come from the engine's generator, registered with the graph, so a
replay draws what the eager tick would (the test of bit-equality runs where a GPU is lent).

Not captured, and said so in summary.json: a drawn T_acq, weight compression, the peer rule,
faults, privacy, an adversary, shards, replicas, an algorithm with its own ``train`` or
``after_train``, or the divergence guard read every tick (engine.guard_every=1)."""
from __future__ import annotations

import numpy as np
import torch

from vecgossip.engines.tick.training import train_jobs

WARM = 2          # eager synchronous ticks before the capture (lazy initialisations, workspaces)
MODES = ("auto", "on", "off")


def why_not(engine, group) -> str | None:
    """Why the ticks of ``engine`` in ``group`` cannot be captured (None: they can)."""
    from vecgossip.algorithms import TickAlgorithm
    a, cfg = engine.algorithm, engine.cfg
    if not a.capturable or type(a).train is not TickAlgorithm.train:
        return f"method {a.name()} does not declare its tick capturable (TickAlgorithm.capturable)"
    lo, hi = cfg.t_acq_range
    reasons = [(lo != hi, f"t_acq [{lo}, {hi}] is drawn: nodes act at different ticks"),
               (a.compression < 1, "weight compression draws a new plan of sent elements every tick"),
               (bool(a.peer_rule), "the peer rule changes the links"), (engine.faults is not None, "faults"),
               (engine.privacy is not None, "privacy"), (engine.shard.sharded, "a sharded run"),
               (not group.single, "replicas"), (getattr(group, "watch", None) is None,
                                                "the divergence guard is read every tick (engine.guard_every=1)")]
    return next((why for bad, why in reasons if bad), None)


def cuda_graph(fn, generators) -> "torch.cuda.CUDAGraph":
    """``fn``'s kernels captured (not run) as a CUDA graph drawing from ``generators``."""
    g = torch.cuda.CUDAGraph()
    for gen in generators:
        g.register_generator_state(gen)
    with torch.cuda.graph(g):
        fn()
    return g


class CapturedTick:
    """Steps 1-3 of a synchronous tick for one engine: eager for the first WARM ticks, then one
    capture, then replays. ``factory(fn, generators)`` makes the graph (``cuda_graph``; a test
    passes an eager stand-in)."""

    def __init__(self, engine, group, factory=cuda_graph) -> None:
        self.engine, self.group, self.factory = engine, group, factory
        self.graph = None
        self.eager = 0
        self._t = 0                                  # the tick the captured work was recorded at

    def device_work(self) -> None:
        """What the graph holds: draw, train, send, merge, for every node (host effects net zero)."""
        e, t = self.engine, self._t
        due = np.arange(e.n)
        mine, images, crops = e.draw(due)
        train_jobs(self.group, [(0, due, None, mine, images, crops)], self.group.watch)
        e.algorithm.after_train(e, t, due, None)

    def tick(self, t: int) -> bool:
        """Tick t if every node acts then (returns False otherwise: the clock's own path runs)."""
        e = self.engine
        if not (e.schedule.next_train == t).all():
            return False
        e.schedule.due(t)
        self._t = t
        if self.graph is None and self.eager < WARM:
            self.device_work()
            self.eager += 1
        else:
            if self.graph is None:
                self.graph = self.factory(self.device_work, [e.gen])
            self.graph.replay()
            self.group.watch.pending = True          # the replayed guard sums are on the device
            if e.t_first_average is None:
                e.t_first_average = t
        e.schedule.reschedule(np.arange(e.n))
        return True

    def describe(self) -> dict:
        return {"captured": self.graph is not None, "eager_ticks": self.eager}
