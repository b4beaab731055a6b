"""The tick clock as the run loop's schedule (:func:`vecgossip.engines.loop.run_loop`): one step
is one tick where something happens (a node trains, an evaluation, a peer update); the ticks in
between change nothing and are skipped. A replica whose nodes diverge under on_divergence=stop
ends at that tick, its last row measured; an engine that reaches early_stop ends there; the
others go on."""
from __future__ import annotations

import numpy as np

from vecgossip.core.device import gpu_path
from vecgossip.core.errors import ConfigError
from vecgossip.core.guard import Diverged, Watch
from vecgossip.engines.tick import graphs
from vecgossip.core.metrics import reach_count
from vecgossip.engines.tick.measures import evaluate_group
from vecgossip.engines.tick.state import History
from vecgossip.engines.tick.training import train_due


class TickClock:
    unit, position, history = "tick", "ticks_run", History

    def __init__(self, group) -> None:
        self.cfg = group.engines[0].cfg
        self.end = self.cfg.max_ticks
        tl = group.engines[0].tl
        self.period = tl.period if tl is not None else None
        g = self.cfg.guard_every            # reads of the divergence guard (core/guard.py): a host sync each
        deferred = gpu_path(group.state.theta) and self.cfg.on_divergence == "stop"
        self.guard_every = (self.cfg.eval_every if deferred else 1) if g == "auto" else int(g)
        group.watch = Watch(group.state.n, group.state.theta.device) if self.guard_every > 1 else None
        self.settled = True                 # the guard has been read since the last step noted anything
        self.captured = self.capture(group)

    def capture(self, group):
        """engine.cuda_graphs (engines/tick/graphs.py): the synchronous tick as one CUDA graph where
        it can be; ``on`` where it cannot stops the run (one line); the engine notes which."""
        mode, e = self.cfg.cuda_graphs, group.engines[0]
        reason = "off" if mode == "off" else ("a CPU runs no CUDA graph" if not group.state.theta.is_cuda
                                              else "clock.enabled: a window's events depend on the clock"
                                              if e.seconds is not None else graphs.why_not(e, group))
        for each in group.engines:           # every replica's summary says it
            each.graphs_note = {"mode": mode, "captured": False, "why_not": reason}
        if reason is not None:
            if mode == "on":
                raise ConfigError(f"engine.cuda_graphs=on cannot capture this run: {reason}; "
                                  "use engine.cuda_graphs=auto (or off)")
            return None
        return graphs.CapturedTick(e, group)

    def begin(self, group) -> list[int]:
        group.start([History() for _ in group.engines], History)
        for e, h in zip(group.engines, group.hists):
            h.initial_variance = {f"var_{k}": float(v) for k, v in zip(e.layout.layers,
                                                                        e.measures.layer_variances())}
        self.same_evaluation_set(group)
        return list(range(len(group.engines)))

    @staticmethod
    def same_evaluation_set(group) -> None:
        import torch
        first = group.engines[0].data.evals
        if not group.single and not all(torch.equal(e.data.evals.x, first.x) and torch.equal(e.data.evals.y, first.y)
                                        for e in group.engines):
            raise ValueError("replicas must share the evaluation set")

    def step(self, group, t: int, live: list[int]) -> tuple[int, dict | None]:
        """Tick t: train, send and merge (steps 1-3), the peer rule, and an evaluation when due."""
        for s in [s for s in live if self.over_budget(group.engines[s])]:
            self.stop_private(group, s, t, live)
        if self.captured is None or live != [0] or not self.captured.tick(t):
            trained = train_due(group, t, live)
            for s, due, bad, online in trained:
                self.after_training(group, s, t, due, bad, online, live)
            if group.engines[0].seconds is not None:       # a window where only messages arrive (clock.*)
                none, done = np.zeros(0, dtype=np.int64), {r[0] for r in trained}
                for s in [s for s in list(live) if s not in done]:
                    self.after_training(group, s, t, none, group.engines[s].settle_pairs(t), None, live)
        if group.watch is not None:
            if t % self.guard_every == 0:
                self.settle(group, t, live)
            self.settled = not group.watch.pending
        if self.period is not None and t % self.period == 0:
            for s in live:
                group.engines[s].algorithm.peers(group.engines[s], t)
        shown = self.evaluate(group, t, live) if live and t % self.cfg.eval_every == 0 else None
        if not live:
            return t + 1, shown
        nxt = min(group.engines[s].schedule.next_event(t, self.cfg.eval_every, self.period, self.end) for s in live)
        return nxt, shown

    @staticmethod
    def over_budget(e) -> bool:
        """Would one more training step take a node of engine ``e`` past privacy.target_epsilon?
        (Nodes train at their own ticks: the run ends before any node's next step could.)"""
        p = e.privacy
        if p is None or p.cfg.target_epsilon is None:
            return False
        return bool(p.epsilons(p.steps + 1).max() > p.cfg.target_epsilon)

    @staticmethod
    def stop_private(group, s: int, t: int, live: list[int]) -> None:
        """Engine s ends before tick t (its budget): its last row is the state it reached."""
        e, hist = group.engines[s], group.hists[s]
        if not hist.rows or hist.rows[-1]["tick"] != t:
            group.record(s, e.measure(t))
        hist.ticks_run = t
        hist.stopped = (f"privacy.target_epsilon={e.privacy.cfg.target_epsilon}: a node's next training step "
                        f"(tick {t} or later) would exceed it")
        live.remove(s)

    def after_training(self, group, s: int, t: int, due, bad, online, live: list[int]) -> None:
        e = group.engines[s]
        try:
            e.after_training(t, due, bad, online)
        except Diverged as err:                  # on_divergence=stop: this engine ends within the tick
            e.diverged[err.nodes] = True         # left out of the last row's statistics
            group.record(s, e.measure(t))
            group.hists[s].diverged = {"tick": t, "nodes": err.nodes.tolist(), "message": str(err)}
            group.hists[s].ticks_run = t
            live.remove(s)

    def settle(self, group, t: int, live: list[int]) -> None:
        """Read the guard's :class:`~vecgossip.core.guard.Watch` (one host sync) and apply
        on_divergence to the rows it flagged since the last read, as if found at tick t."""
        bad = group.watch.read()
        for s in list(live):
            e = group.engines[s]
            rows = bad[(bad >= s * group.rows) & (bad < (s + 1) * group.rows)] - s * group.rows
            found = e.shard.union(rows + e.shard.lo)
            if found.size:
                self.after_training(group, s, t, np.zeros(0, dtype=np.int64), found, None, live)

    def evaluate(self, group, t: int, live: list[int]) -> dict:
        """Every live engine's metrics row; an engine that reached early_stop ends here."""
        evaluated = evaluate_group(group, live)
        for s in list(live):
            e = group.engines[s]
            group.record(s, e.measure(t, evaluated.get(s)))
            acc = group.hists[s].acc[-1]
            if self.cfg.early_stop and (acc >= self.cfg.threshold).sum() >= reach_count(e.measures.report.size,
                                                                                         self.cfg.most_frac):
                group.hists[s].stopped_early, group.hists[s].ticks_run = True, t + 1
                live.remove(s)
        last = group.hists[s].rows[-1]
        return {"acc": f"{last['acc_mean']:.3f}", "reached": f"{last['frac_reached']:.2f}"}

    def finish(self, group, t: int, live: list[int]) -> None:
        """After the last step: the guard's last flags, and the final state measured when the
        last evaluation came before it (``eval_every`` need not divide ``max_ticks``: the state
        after tick max_ticks - 1 is what the run's ``final_*`` figures describe)."""
        if group.watch is not None and group.watch.pending:
            self.settle(group, t, live)
        if t >= self.end and not group.view().interrupted:
            last = self.end - 1
            late = [s for s in live if group.hists[s].rows and group.hists[s].rows[-1]["tick"] < last]
            if late:
                self.evaluate(group, last, list(late))
        if self.captured is not None:
            group.engines[0].graphs_note.update(self.captured.describe())
        for s, (e, h) in enumerate(zip(group.engines, group.hists)):
            if s in live:
                h.ticks_run = t
            h.t_first_average = e.t_first_average
