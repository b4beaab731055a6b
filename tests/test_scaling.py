"""Issue 25: the scaling report (vecgossip/report/scaling.py) from runs at several sizes, and the
per-run memory record it reads (peak since the run started, beside memory.estimate)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

import vecgossip
from vecgossip.report.tick import report
from vecgossip.report.scaling import exponent

sys.path.insert(0, str(Path(__file__).resolve().parent / "golden"))
import cases  # noqa: E402


def test_exponent_recovers_a_power_law():
    n = np.array([50.0, 100, 200, 500])
    a, b = exponent(n, 3e-4 * n ** 1.3)
    assert abs(b - 1.3) < 1e-9 and abs(a - 3e-4) < 1e-12


def test_scaling_report_from_runs_at_three_sizes(tmp_path):
    cases.register()
    for n in (6, 10, 14):
        vecgossip.run(vecgossip.compose(overrides=["method=vc", "data.name=golden", "model=mlp", f"nodes={n}",
                                                   "degree=2", "max_ticks=21", "t_acq=5", "data.batch_size=8",
                                                   "progress=false"]), run_dir=tmp_path / "sweep" / f"n{n}")
    summary = json.loads((tmp_path / "sweep" / "n6" / "summary.json").read_text())
    assert summary["memory"]["peak_bytes"] > 0 and summary["memory"]["estimate_bytes"] > 0
    report(tmp_path / "sweep", tmp_path / "out")
    df = pd.read_csv(tmp_path / "out" / "scaling.csv")
    assert sorted(df.N) == [6, 10, 14] and (df.steps == 21).all()
    assert np.allclose(df.seconds_per_step, df.wall_seconds / 21)
    md = (tmp_path / "out" / "scaling.md").read_text()
    assert "| tick | vc | " in md and "Fitted exponents" in md and "Memory estimate against the measured peak" in md
    assert (tmp_path / "out" / "scaling.png").stat().st_size > 10_000
