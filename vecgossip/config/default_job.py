"""The default job's rule: ``python -m vecgossip`` with no method, preset or sweep on the command
line runs the ``compare`` methods side by side (:mod:`vecgossip.composition.demo`); the report reads
the same rule to tell the default job's parent folder from an incomplete run."""
from __future__ import annotations

from omegaconf import DictConfig


def wanted(cfg: DictConfig, overrides: list[str], multirun: bool) -> bool:
    """The demo runs when ``compare`` is set and the command line chose no method, preset or sweep."""
    chosen = any(o.lstrip("+~").startswith(("method=", "experiment=")) for o in overrides)
    return bool(cfg.get("compare")) and not chosen and not multirun
