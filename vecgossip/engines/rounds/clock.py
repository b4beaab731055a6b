"""The round engine's schedule for the run loop (:func:`vecgossip.engines.loop.run_loop`): one step
is one round t = 0, 1, ...: (faults: who is online), the participants, their local work (batched
across replicas where the algorithm keeps the default), the divergence guard, the communication,
and the metrics every ``eval_every`` rounds (and after the last). A replica that diverges under
on_divergence=stop ends within that round, its last row measured; the others go on."""
from __future__ import annotations

from vecgossip.core.device import upload_indices
from vecgossip.core.guard import Diverged
from vecgossip.engines.rounds.local import local_train
from vecgossip.engines.rounds.state import RoundHistory


class RoundClock:
    unit, position, history = "round", "rounds_run", RoundHistory

    def __init__(self, group) -> None:
        self.cfg = group.engines[0].cfg
        self.end = self.cfg.rounds

    def begin(self, group) -> list[int]:
        group.start([RoundHistory(spectral_gaps=e.gaps) for e in group.engines], RoundHistory)
        for s, e in enumerate(group.engines):
            group.record(s, e.measure(0, float("nan"), 0.0))
        return list(range(len(group.engines)))

    def step(self, group, t: int, live: list[int]) -> tuple[int, dict | None]:
        """Round t for the live engines; returns t + 1 and the progress bar's figures if measured
        (t itself when privacy.target_epsilon ended every engine before it)."""
        for s in [s for s in live if self.over_budget(group.engines[s])]:
            self.stop_private(group, s, t, live)
        if not live:
            return t, None
        parts = []
        for s in live:
            e = group.engines[s]
            e.set_online(t)
            parts.append((s, e.participants(), e.opt.lr_at(t)))
        losses = local_train(group, parts)
        done = t + 1
        evaluate = done % self.cfg.eval_every == 0 or done == self.end
        for s, clients, lr in parts:
            self.communicate(group, s, t, clients, lr, losses[s], evaluate, live)
        if not (live and evaluate):
            return done, None
        last = group.hists[live[0]].rows[-1]
        return done, {"acc": f"{last['acc_mean']:.3f}", "xbar": f"{last['xbar_acc']:.3f}"}

    @staticmethod
    def over_budget(e) -> bool:
        """Would round t take a client of engine ``e`` past privacy.target_epsilon (every client
        taking its K_i private steps)?"""
        p = e.privacy
        if p is None or p.cfg.target_epsilon is None:
            return False
        return bool(p.epsilons(p.steps + e.steps).max() > p.cfg.target_epsilon)

    @staticmethod
    def stop_private(group, s: int, t: int, live: list[int]) -> None:
        """Engine s ends before round t (its budget): its last row is round t's."""
        e, hist = group.engines[s], group.hists[s]
        if hist.rows[-1]["round"] != t:
            group.record(s, e.measure(t, float("nan"), 0.0))
        hist.rounds_run = t
        hist.stopped = f"privacy.target_epsilon={e.privacy.cfg.target_epsilon}: round {t} would exceed it"
        live.remove(s)

    def communicate(self, group, s: int, t: int, clients, lr: float, loss: float, evaluate: bool,
                    live: list[int]) -> None:
        """Engine s after its local work: the divergence guard, the communication, the metrics."""
        e = group.engines[s]
        try:
            clients = e.check(t, clients)
        except Diverged as err:              # on_divergence=stop: this engine ends within the round
            e.diverged[upload_indices(err.nodes, e.device)] = True       # out of the last row
            e.diverged_host[err.nodes] = True
            group.record(s, e.measure(t, loss, 0.0, lr))
            group.hists[s].diverged = {"round": t, "nodes": err.nodes.tolist(), "message": str(err)}
            group.hists[s].rounds_run = t
            live.remove(s)
            return
        sent = e.communicate(t, clients)
        if e.timer is not None:
            e.time_round(t, clients)
        if not group.single:
            e.keep_block(group.state.theta[group.block(s)])
        e.bytes_total += sent
        if evaluate:
            group.record(s, e.measure(t + 1, loss, sent, lr))
        if e.timer is not None:
            group.amend(s, e.timer.fill)          # clock.barrier=node: rows whose rounds have ended since

    def finish(self, group, t: int, live: list[int]) -> None:
        for s, e in enumerate(group.engines):
            if e.timer is not None and not group.view().interrupted:   # (interrupted: the next round comes
                e.timer.drain()                                          # on resume)
                group.amend(s, e.timer.fill)
        for s, h in enumerate(group.hists):
            if s in live and h.stopped is None:
                h.rounds_run = t if group.view().interrupted else self.end
