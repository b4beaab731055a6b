"""Numbers the README states are copies of committed outputs under results/."""
from __future__ import annotations

import re

import pandas as pd
import pytest

from test_config import REPO

NAMES = {"D-PSGD": "dpsgd", "DFedAvg": "dfedavg", "DFedAvgM": "dfedavgm", "DFedSAM": "dfedsam",
         "DFedSAM-MGS": "dfedsam_mgs"}


def readme_rows(heading: str) -> list[list[str]]:
    text = (REPO / "README.md").read_text()
    section = text.split(heading, 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| method")]
    return [[c.strip() for c in r.strip("|").split("|")] for r in rows]


def test_paper2_cpu_table_is_the_committed_report():
    table = pd.read_csv(REPO / "results" / "dfedsam_topology_cpu" / "dfl_topology.csv")
    rows = readme_rows("### Paper 2 at the CPU scale")
    assert len(rows) == 5
    for name, ring, ring_xbar, complete, complete_xbar in rows:
        for topo, cell, xbar in (("ring", ring, ring_xbar), ("complete", complete, complete_xbar)):
            r = table[(table.method == NAMES[name]) & (table.topology == topo)].iloc[0]
            ours = re.match(r"([\d.]+)(?: ± ([\d.]+) \((\d) seeds\))? / ([\d.]+)", cell)
            assert ours, cell
            assert float(ours.group(1)) == pytest.approx(r.acc_mean, abs=0.005), (name, topo)
            if ours.group(2):
                assert float(ours.group(2)) == pytest.approx(r.acc_std, abs=0.005) and int(ours.group(3)) == r.seeds
            else:
                assert r.seeds == 1
            assert float(ours.group(4)) == r.paper
            assert float(xbar) == pytest.approx(r.xbar_acc, abs=0.005), (name, topo)
