"""The run loop both engines share, in the spirit of fedjax's ``run_federated_experiment`` around
``algorithm.apply``: the loop owns the position, the progress bar, the run hooks (``on_eval``:
partial metrics files, trackers), checkpoints and stopping; a clock (the tick engine's
:class:`~vecgossip.engines.tick.clock.TickClock`, the round engine's
:class:`~vecgossip.engines.rounds.clock.RoundClock`) owns what one step of its schedule does
and where the next step is."""
from __future__ import annotations

import time
from typing import Protocol

from tqdm.auto import tqdm


class Clock(Protocol):
    """One engine's schedule, stepped by :func:`run_loop` over a group of engines."""

    unit: str        # "tick" | "round": the progress bar's unit
    end: int         # the last position (max_ticks, rounds)
    position: str    # the history's field that records how far a run went (ticks_run, rounds_run)
    history: type    # the engine's history class

    def begin(self, group) -> list[int]:
        """A fresh run: histories started, the first measurements; returns the live engines."""

    def step(self, group, t: int, live: list[int]) -> tuple[int, dict | None]:
        """Position ``t`` for the ``live`` engines (removing those that end here); returns the
        next position and, if it measured, the progress bar's figures."""

    def finish(self, group, t: int, live: list[int]) -> None:
        """After the last step: each history's position."""


def run_loop(group, clock: Clock, progress: bool = True, on_eval=None, checkpointer=None,
             resume: dict | None = None):
    """Run ``group`` (engines/group.py: one engine, a shard or replicas) with ``clock`` to its end
    (or until every engine stopped early, diverged or a stop signal came). ``on_eval(history)``
    after every evaluation; ``checkpointer.step(...)`` after every step (it writes when due and
    says whether to stop); ``resume``: a :meth:`Group.state_dict` to continue from. Returns the
    group's :meth:`~vecgossip.engines.group.Group.view`."""
    if resume is None:
        t, live = 0, clock.begin(group)
    else:
        t, live = group.load_state_dict(resume, clock.history)
    view = group.view()
    start, before = time.perf_counter(), view.wall_seconds
    bar = tqdm(total=clock.end, initial=t, unit=clock.unit, dynamic_ncols=True,
               disable=not progress or group.engines[0].shard.rank > 0)
    while t < clock.end and live:
        nxt, shown = clock.step(group, t, live)
        if shown is not None:
            bar.set_postfix(**shown, **({} if group.single else {"replicas": len(live)}))
            if on_eval is not None:
                on_eval(view)
        bar.update(nxt - t)
        t = nxt
        if not live:
            break
        if checkpointer is not None and getattr(clock, "settled", True) and checkpointer.step(
                t, clock.end, view, before + time.perf_counter() - start, lambda: group.state_dict(t, live)):
            break                   # (settled: the divergence guard holds no unread flag, clock.settle)
    bar.close()
    clock.finish(group, t, live)
    group.finish(before + time.perf_counter() - start, clock.position, t)
    return view
