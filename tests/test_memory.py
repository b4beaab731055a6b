"""The memory estimate (vecgossip.runtime.memory) against the measured peak for every built-in
method preset at small size (issue 39: "within 20% of the peak for every built-in algorithm").

The sweep itself is slow (one ~2-minute process per preset: ``pytest -m slow tests/test_memory.py``,
the same commands as results/memory_cpu/measure.py); the suite checks that the committed study
covers every preset there is and that each measured peak lies within 20% of its estimate. The
gathering rules' share of the estimate is checked in the suite against a measured peak
(tests/test_message_passing.py::test_gather_workspace_covers_each_rules_measured_peak)."""
from __future__ import annotations

import csv
import importlib.util

import pytest

from conftest import REPO


def measure_module():
    spec = importlib.util.spec_from_file_location("measure", REPO / "results" / "memory_cpu" / "measure.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


measure = measure_module()


def test_the_committed_study_covers_every_preset_within_20_percent():
    rows = {r["method"]: r for r in csv.DictReader(open(REPO / "results" / "memory_cpu" / "memory.csv"))}
    assert sorted(rows) == measure.PRESETS                                  # a new preset needs its row
    lo, hi = measure.BOUNDS
    for method, r in rows.items():
        ratio = int(r["peak_bytes"]) / int(r["estimate_bytes"])
        assert lo <= ratio <= hi, (method, round(ratio, 3))


@pytest.mark.slow
@pytest.mark.parametrize("method", measure.PRESETS)
def test_estimate_within_20_percent_of_the_peak(method, tmp_path, data_root, monkeypatch):
    monkeypatch.setenv("VECGOSSIP_DATA", str(data_root))
    summary = measure.run(method, tmp_path / method)
    ratio = summary["memory"]["peak_bytes"] / summary["memory"]["estimate_bytes"]
    lo, hi = measure.BOUNDS
    assert lo <= ratio <= hi, (method, round(ratio, 3))
