"""The default job: paper 1's point in a few minutes. ``python -m vecgossip`` with no method and no
preset runs the baseline network twice, plain gossip learning and variance-corrected averaging
(``compare``), capped at ``compare_ticks`` ticks, each in its own subfolder of the run directory,
then the report over both: ``accuracy_bands.png`` puts their accuracy side by side (the plateau
vs learning), ``table1.md`` their reach ticks. Choosing a method, a preset or a sweep runs that
alone; the paper's full 10,000-tick runs are ``+experiment=baseline`` / ``+experiment=vc``.
"""
from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig

LOG = logging.getLogger("vecgossip")


def run_demo(cfg: DictConfig, overrides: list[str], out: Path) -> list[dict]:
    from hydra import compose

    from vecgossip.report.tick import report
    from vecgossip.composition.root import outcome, run
    ticks = [] if any(o.startswith("max_ticks=") for o in overrides) else [f"max_ticks={cfg.compare_ticks}"]
    summaries = []
    for i, method in enumerate(cfg.compare, 1):
        LOG.info(f"default job, run {i} of {len(cfg.compare)}: {method} -> {out / method}")
        sub = compose(config_name="config", overrides=[*overrides, f"method={method}", "compare=null", *ticks])
        s = run(sub, out / method)
        print(f"[vecgossip] {method}: {outcome(s)} -> {out / method}")
        summaries.append(s)
    report(out)
    print(f"[vecgossip] side by side: {out / 'accuracy_bands.png'}, {out / 'table1.md'}; the paper's full "
          "runs: +experiment=baseline, +experiment=vc")
    return summaries
