"""Reports over finished runs: ``python -m vecgossip.report RUNS... [--out DIR]``. The tick
engine's runs into paper 1's Table I and figures (:mod:`.tick`), the round engine's into paper 2's
tables (:mod:`.rounds`), scaling studies (:mod:`.scaling`); rows grouped by every option that
differs except the seed (:mod:`.grouping`); the papers' own numbers (:mod:`.paper`)."""
from vecgossip.report.tick import load_runs, main, report, table1, table1_markdown  # noqa: F401
