"""Experiment tracking beside the tidy outputs (metrics.csv and summary.json stay the source of
truth). ``logger=tensorboard`` writes ``tb/events.out.tfevents.*`` in the run directory: every
metrics row as scalars at its tick (tick engine) or round (round engine), the resolved config as
text. Optional: needs the ``tensorboard`` package (``pip install -e '.[tensorboard]'``)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

LOGGERS = (None, "tensorboard")


class TensorBoard:
    """An ``on_eval(history)`` hook: writes the rows added since its last call. A resumed run
    (``resumed=True``) rewrites its history from the first row and purges the events the
    interrupted process had written, so the event file never holds a step twice."""

    def __init__(self, config_yaml: str, out: Path, resumed: bool = False):
        from torch.utils.tensorboard import SummaryWriter
        self.writer = SummaryWriter(log_dir=str(out / "tb"), purge_step=0 if resumed else None)
        self.writer.add_text("config", "```yaml\n" + config_yaml + "```")
        self.done = 0

    def __call__(self, hist) -> None:
        for row in hist.rows[self.done:]:
            step = int(row["tick"] if "tick" in row else row["round"])
            for key, value in row.items():
                if key in ("tick", "round") or isinstance(value, bool) or not isinstance(value, (int, float)):
                    continue
                if math.isfinite(value):
                    self.writer.add_scalar(key, value, step)
        self.done = len(hist.rows)
        self.writer.flush()

    def close(self, hist) -> None:
        self(hist)
        self.writer.close()


def make(logger: str | None, config_yaml: str, out: Path | None, resumed: bool) -> TensorBoard | None:
    """The ``logger`` option's hook (None: no logger, or no output folder on this rank);
    ``config_yaml``: the resolved config, recorded beside the scalars."""
    if out is None or logger is None:
        return None
    return TensorBoard(config_yaml, out, resumed)


def chain(*hooks: Callable | None) -> Callable | None:
    """One on_eval hook calling each given hook in turn (None when there are none)."""
    hooks = tuple(h for h in hooks if h is not None)
    if not hooks:
        return None

    def run(hist) -> None:
        for h in hooks:
            h(hist)
    return run
