"""Issue 23: the built-in methods, re-expressed on the public algorithm interface, reproduce the
outputs recorded before the refactor (tests/golden/cases.py: one short float64 run per method and
variant, metrics.csv and accuracy.npy).

On the machine kind that recorded them (same CPU vector extensions, torch build and threads,
tests/golden/machine.json) the files must be equal byte for byte. On any other CPU, whose BLAS
kernels may round differently, every number must agree to 1e-9 relative: in float64 a changed
rounding moves the results by ~1e-15, while a changed algorithm moves them by far more than 1e-9
(a step of lr 0.01 on one node changes losses in the 3rd-5th digit)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

GOLDEN = Path(__file__).resolve().parent / "golden"
sys.path.insert(0, str(GOLDEN))
import cases  # noqa: E402

from conftest import torch_threads  # noqa: E402



def recorded(name: str) -> list[Path]:
    """The run's output files (relative paths) that have a recording."""
    stored = {v: k for k, v in cases.STORED.items()}
    return sorted(p.relative_to(GOLDEN / name).with_name(stored[p.name]) for p in (GOLDEN / name).rglob("*")
                  if p.name in stored)


@pytest.mark.parametrize("name", list(cases.CASES))
def test_outputs_equal_the_pre_refactor_recordings(name, tmp_path):
    files = recorded(name)
    assert files, f"no recording for {name}: python tests/golden/cases.py {name}"
    recorded_on = cases.recorded_on(name)
    with torch_threads(recorded_on["threads"]):           # as recorded, whatever an earlier test left set
        same_machine = recorded_on == cases.machine()
        out = cases.run_case(name, tmp_path / name)
    for rel in files:
        want, got = GOLDEN / name / rel.with_name(cases.STORED[rel.name]), out / rel
        assert got.exists(), f"{name}: {rel} not written"
        if rel.suffix == ".npy":     # kept as exact text: equal values, dtype and shape = equal .npy bytes
            a, b = np.load(got), cases.load_accuracy(want)
            if same_machine:
                assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True), \
                    f"{name}: {rel} differs from the recording"
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12, err_msg=f"{name}: {rel}")
            continue
        if same_machine:
            assert got.read_bytes() == want.read_bytes(), f"{name}: {rel} differs from the recording"
        a, b = pd.read_csv(got), pd.read_csv(want)
        assert list(a.columns) == list(b.columns) and len(a) == len(b), f"{name}: {rel} has other rows/columns"
        np.testing.assert_allclose(a.to_numpy(float), b.to_numpy(float), rtol=1e-9, atol=1e-12,
                                   err_msg=f"{name}: {rel}")


def test_the_recordings_cover_every_built_in_method():
    methods = {a.split("=", 1)[1] for c in cases.CASES.values() for a in c if a.startswith("method=")}
    conf = {p.stem for p in (Path(cases.__file__).parents[2] / "vecgossip" / "conf" / "method").glob("*.yaml")}
    assert conf <= methods, f"methods without a recording: {sorted(conf - methods)}"
