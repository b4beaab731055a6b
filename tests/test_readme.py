"""Numbers the docs state are copies of committed outputs under results/ (the paper pages' tables,
checked cell by cell against the reports' CSVs)."""
from __future__ import annotations

import re

import pandas as pd
import pytest

from test_config import REPO

NAMES = {"D-PSGD": "dpsgd", "DFedAvg": "dfedavg", "DFedAvgM": "dfedavgm", "DFedSAM": "dfedsam",
         "DFedSAM-MGS": "dfedsam_mgs"}


def readme_rows(heading: str, page: str) -> list[list[str]]:
    text = (REPO / "docs" / page).read_text()
    section = text.split(heading, 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| method")]
    return [[c.strip() for c in r.strip("|").split("|")] for r in rows]


def test_paper2_cpu_table_is_the_committed_report():
    table = pd.read_csv(REPO / "results" / "dfedsam_topology_cpu" / "dfl_topology.csv")
    rows = readme_rows("## Paper 2 at the CPU scale", "paper2.md")
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


PAPER1_COLUMNS = (("tl_compression", "iid"), ("tl_compression", "alpha=0.5"), ("vc", "iid"), ("vc", "alpha=0.5"))


def test_paper1_cpu_table_is_the_committed_report():
    """docs/paper1.md's table: every cell is results/paper1_cpu/table1.csv (mean, std and seed
    count as the report computed them, the paper's value); an empty cell is a cell not run."""
    table = pd.read_csv(REPO / "results" / "paper1_cpu" / "table1.csv", dtype={"t_acq": str})
    rows = [r for r in readme_rows("## Paper 1: reproduced numbers", "paper1.md") if r[0] != "T_acq"]
    assert len(rows) >= 4
    filled = 0
    for t_acq, r, n, k, *cells in rows:
        for (method, data), cell in zip(PAPER1_COLUMNS, cells, strict=True):
            row = table[(table.t_acq == t_acq) & (table.R == int(r)) & (table.N == int(n)) & (table.k == int(k))
                        & (table.method == method) & (table.data == data)].iloc[0]
            if not cell:
                assert row.seeds == 0, (t_acq, r, n, k, method, data)
                continue
            ours = re.fullmatch(r"(\d+)(?: ± (\d+) \((\d) seeds\))? / (\d+)", cell)
            assert ours, cell
            assert row.reached == row.seeds and int(ours.group(1)) == round(row.most_reach_mean), cell
            if ours.group(2):
                assert int(ours.group(2)) == round(row.most_reach_std) and int(ours.group(3)) == row.seeds
            else:
                assert row.seeds == 1
            assert int(ours.group(4)) == row.paper
            filled += 1
    assert filled >= 10


def test_paper1_cpu_sentences_are_the_committed_runs():
    """The FedAvg reach tick and the baseline's plateau that docs/paper1.md states, from results/paper1_cpu/runs.csv."""
    runs = pd.read_csv(REPO / "results" / "paper1_cpu" / "runs.csv")
    text = " ".join((REPO / "docs" / "paper1.md").read_text().split())
    fedavg = runs[runs.method == "fedavg_tick"].iloc[0]
    assert f"reaches 90% at tick {int(fedavg.most_reach_tick)}" in text
    base = runs[runs.method == "gossip"]
    assert sorted(base.data) == ["alpha=0.5", "iid"] and base.first_reach_tick.isna().all()
    assert (base.ticks_run == 3000).all() and "no node reaches 90% by tick 3000" in text
