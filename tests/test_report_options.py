"""The report groups by every option that differs except the seed (issue 49): two runs that differ
only in an attack's own option (adversary.epsilon) are two columns of byzantine.md, never one cell
pooled as seeds; two privacy runs that differ only in privacy.clip, two tables. Through the CLI."""
from __future__ import annotations

import subprocess
import sys

import pytest

from test_config import REPO

BASE = ["method=dpsgd", "data=mnist", "model=mlp", "clients=6", "topology=ring", "rounds=2", "eval_every=2",
        "data.local_test_size=10", "data.global_test_size=50", "progress=false"]


def run(args: list[str], cwd) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


@pytest.mark.slow   # ~8 s; one option as columns of the report by default: test_two_clips_are_two_tables
def test_two_epsilons_are_two_columns(data_root, tmp_path):
    run(["vecgossip", "-m", *BASE, f"data_root={data_root}", "adversary.nodes=1", "adversary.attack=ipm",
         "adversary.epsilon=0.1,5", f"hydra.sweep.dir={tmp_path / 'sweep'}"], REPO)
    run(["vecgossip.report", str(tmp_path / "sweep"), "--out", str(tmp_path / "report")], REPO)
    md = (tmp_path / "report" / "byzantine.md").read_text()
    assert "ipm (epsilon=0.1)" in md and "ipm (epsilon=5" in md, md
    row = next(line for line in md.splitlines() if line.startswith("| dpsgd |"))
    assert row.count("(n=1)") == 2                               # one run in each column, none pooled


def test_two_clips_are_two_tables(data_root, tmp_path):
    run(["vecgossip", "-m", *BASE, f"data_root={data_root}", "privacy.noise_multiplier=1", "privacy.clip=0.5,2",
         f"hydra.sweep.dir={tmp_path / 'sweep'}"], REPO)
    run(["vecgossip.report", str(tmp_path / "sweep"), "--out", str(tmp_path / "report")], REPO)
    md = (tmp_path / "report" / "privacy.md").read_text()
    assert "privacy.clip=0.5" in md and "privacy.clip=2" in md, md
