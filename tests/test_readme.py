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
    """docs/paper1.md includes results/paper1_cpu/table1.md, which is what results/paper1_cpu/table.py
    makes of the committed runs (N = 50 and N = 1000) with the report's own table code; its filled
    cells have the N = 50 and N = 1000 runs behind them."""
    import runpy
    page = (REPO / "docs" / "paper1.md").read_text()
    assert '--8<-- "results/paper1_cpu/table1.md"' in page
    made = [REPO / "results" / "paper1_cpu" / f for f in ("table1.md", "table1.csv", "n50_runs.csv")]
    backup = [f.read_bytes() for f in made]                              # table.py writes them: put them back
    committed = backup[0].decode()
    try:
        runpy.run_path(str(REPO / "results" / "paper1_cpu" / "table.py"))
        assert (REPO / "results" / "paper1_cpu" / "table1.md").read_text() == committed
    finally:
        for f, b in zip(made, backup):
            f.write_bytes(b)
    table = pd.read_csv(REPO / "results" / "paper1_cpu" / "table1.csv")
    assert {50, 1000} <= set(table[table.seeds > 0].N)
    n50 = table[(table.N == 50) & table.method.isin(["tl_compression", "vc"])]
    assert len(n50) == 32 and (n50.seeds > 0).all(), "an N = 50 Table I cell is not run"
    row = table[(table.N == 50) & (table.R == 1) & (table.k == 8) & (table.t_acq.astype(str) == "10")
                & (table.method == "vc") & (table.data == "iid")].iloc[0]
    assert row.seeds == 3 and round(row.most_reach_mean) == 587 and row.paper == 550


def test_readme_table1_is_the_committed_table():
    """The README's Table I section is results/paper1_cpu/table1.md verbatim (N = 50 and N = 1000)."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Table I (paper 1) on a CPU", 1)[1].split("\n## ", 1)[0]
    assert (REPO / "results" / "paper1_cpu" / "table1.md").read_text().strip() in section, \
        "README's Table I section is stale: paste results/paper1_cpu/table1.md (after results/paper1_cpu/table.py) there"
    rows = [line.split("|")[3].strip() for line in section.splitlines() if line.startswith("| ")]
    assert {"50", "1000"} <= set(rows)


def test_paper1_cpu_sentences_are_the_committed_runs():
    """The FedAvg reach tick and the baseline's plateau that docs/paper1.md states, from results/paper1_cpu/runs.csv."""
    runs = pd.read_csv(REPO / "results" / "paper1_cpu" / "runs.csv")
    text = " ".join((REPO / "docs" / "paper1.md").read_text().split())
    fedavg = runs[runs.method == "fedavg_tick"].iloc[0]
    assert f"reaches 90% at tick {int(fedavg.most_reach_tick)}" in text
    base = runs[runs.method == "gossip"]
    assert sorted(base.data) == ["alpha=0.5", "iid"] and base.first_reach_tick.isna().all()
    assert (base.ticks_run == 3000).all() and "no node reaches 90% by tick 3000" in text
