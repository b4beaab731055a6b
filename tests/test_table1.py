"""The table1 preset expands to exactly the 64 expected runs; the report turns a synthetic multirun
directory into the paper's table, including a not-reached cell and an incomplete run."""
from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser

from test_config import CONF, make
from vecgossip.report.tick import report
from vecgossip.engines.tick.config import t_acq_range as parse_t_acq
from vecgossip.composition.root import validate


def table1_jobs() -> list[list[str]]:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["+experiment=table1"], return_hydra_config=True)
    params = [f"{k}={v}" for k, v in cfg.hydra.sweeper.params.items()]
    (batch,) = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(params), None)
    return batch


def test_table1_is_the_64_run_product():
    jobs = table1_jobs()
    assert len(jobs) == 64
    seen = set()
    for job in jobs:
        cfg = make(["+experiment=table1", *job])
        validate(cfg)
        key = (parse_t_acq(cfg.engine.t_acq), cfg.averaging.R, cfg.topology.n, cfg.topology.k,
               cfg.method_name, cfg.data.alpha)
        seen.add(key)
        if cfg.method_name == "vc":
            assert (cfg.averaging.beta, cfg.averaging.correction, cfg.averaging.compression) == (0.0, True, 1.0)
            assert not cfg.engine.tl.enabled
        else:
            assert (cfg.averaging.beta, cfg.averaging.correction, cfg.averaging.compression) == (0.5, False, 0.2)
            assert cfg.engine.tl.enabled
        assert cfg.engine.early_stop and cfg.engine.max_ticks == 10000
    want = set(itertools.product([(10, 10), (1, 19)], [1, 4], [50, 1000], [8, 32], ["tl_compression", "vc"], [None, 0.5]))
    assert seen == want


def fake_run(path, t_acq, R, n, k, method, alpha, seed, most, ticks=10000, beta=0.0):
    path.mkdir(parents=True)
    (path / ".hydra").mkdir()
    cfg = {"seed": seed, "engine": {"t_acq": t_acq, "max_ticks": 10000},
           "averaging": {"R": R, "beta": beta, "correction": method == "vc", "compression": 1.0},
           "topology": {"name": "regular", "n": n, "k": k}, "data": {"alpha": alpha}}
    (path / "summary.json").write_text(json.dumps({
        "name": "table1", "method": method, "config": cfg, "first_reach_tick": most, "most_reach_tick": most,
        "plateau_delay_tick": 50, "ticks_run": ticks if most is None else most + 1, "wall_seconds": 1.0}))
    pd.DataFrame({"tick": [0, 10], "acc_mean": [0.1, 0.5], "acc_min": [0.0, 0.4], "acc_max": [0.2, 0.6],
                  "var_ip1": [1.0, 0.5], "wdiff_ip1": [3.0, 2.0], "wdiff_ip2": [1.0, 1.0]}).to_csv(path / "metrics.csv", index=False)


def test_report_on_synthetic_multirun(tmp_path):
    root = tmp_path / "multirun"
    fake_run(root / "0", 10, 1, 50, 8, "vc", None, 0, 500)
    fake_run(root / "1", 10, 1, 50, 8, "vc", None, 1, 700)
    fake_run(root / "2", 10, 1, 50, 8, "tl_compression", None, 0, None)            # not reached
    fake_run(root / "3", [1, 19], 4, 50, 32, "vc", 0.5, 0, 1900)
    (root / "4" / ".hydra").mkdir(parents=True)                                      # crashed / running
    fake_run(root / "5", 10, 1, 50, None, "fedavg", None, 0, 330)                   # star: no k
    res = report(root)
    t1 = res["table1"]
    row = t1[(t1.t_acq == "10") & (t1.R == 1) & (t1.N == 50) & (t1.k == 8) & (t1.method == "vc") & (t1.data == "iid")].iloc[0]
    assert (row.seeds, row.most_reach_mean, row.paper) == (2, 600.0, 550)
    assert row.most_reach_std == np.std([500, 700], ddof=1)
    assert abs(row.ratio - 600 / 550) < 1e-12
    nr = t1[(t1.method == "tl_compression") & (t1.data == "iid") & (t1.N == 50) & (t1.k == 8) & (t1.R == 1) & (t1.t_acq == "10")].iloc[0]
    assert nr.not_reached == 1 and np.isnan(nr.ratio)
    async_row = t1[(t1.t_acq == "1-19") & (t1.R == 4) & (t1.N == 50) & (t1.k == 32) & (t1.method == "vc") & (t1.data == "alpha=0.5")].iloc[0]
    assert (async_row.most_reach_mean, async_row.paper) == (1900, 1900)
    assert t1.paper.notna().sum() == 64 and len(t1) == 65          # every paper cell, plus the FedAvg run
    md = (root / "table1.md").read_text()
    assert "| 10 | 1 | 50 | 8 | 1/1 not reached by 10000 / 1690 | not run / 3580 | 600 ± 141; n=2 / 550 (1.09x) |" in md
    assert "| 10 | 1 | 50 | 32 | not run / 1750 |" in md and "Incomplete runs" in md and "- 4" in md
    assert res["incomplete"] == ["4"]
    for f in ("table1.csv", "runs.csv", "fig8e.png", "accuracy_bands.png", "variance.png"):
        assert (root / f).stat().st_size > 0
    assert len(pd.read_csv(root / "runs.csv")) == 5
    assert "| 10 | 1 | 50 | - | fedavg | iid | 330 |" in md


def test_a_swept_option_splits_table1_cells_and_is_named(tmp_path):
    """beta swept over 0 and 0.5 with two seeds each: two cells of n=2, one table per value."""
    root = tmp_path / "multirun"
    for i, (beta, seed, most) in enumerate([(0.0, 0, 500), (0.0, 1, 600), (0.5, 0, 900), (0.5, 1, 1100)]):
        fake_run(root / str(i), 10, 1, 50, 8, "vc", None, seed, most, beta=beta)
    t1 = report(root)["table1"]
    got = t1[(t1.method == "vc") & (t1.data == "iid") & (t1.k == 8) & (t1.N == 50) & (t1.R == 1) & (t1.t_acq == "10")]
    assert sorted(zip(got.options, got.seeds, got.most_reach_mean)) == [
        ("averaging.beta=0.0", 2, 550.0), ("averaging.beta=0.5", 2, 1000.0)]
    md = (root / "table1.md").read_text()
    assert "## Runs with averaging.beta=0.0" in md and "## Runs with averaging.beta=0.5" in md
    assert "550 ± 71; n=2 / 550 (1.00x)" in md and "1000 ± 141; n=2 / 550 (1.82x)" in md


def fake_round_run(path, method, topology, seed, acc, consensus, clients=16, rounds=20, data="CIFAR-10 (JPEG copy)"):
    """A round-engine job directory: summary.json and metrics.csv as the engine writes them."""
    path.mkdir(parents=True)
    (path / ".hydra").mkdir()
    evals = [0, 10, 20]
    pd.DataFrame({"round": evals, "acc_mean": [0.1, acc / 2, acc], "consensus_distance": consensus,
                  "xbar_acc": [0.1, 0.2, acc - 0.05]}).to_csv(path / "metrics.csv", index=False)
    s = {"engine": "rounds", "name": "dfl", "method": method, "topology": topology, "n_clients": clients,
         "rounds_run": rounds, "model": "cnn", "data": data, "partition": "dirichlet", "alpha": 0.3,
         "final": {"acc_mean": acc, "acc_min": acc - 0.2, "global_acc_mean": acc - 0.1, "xbar_acc": acc - 0.05,
                   "consensus_distance": consensus[-1]},
         "best": {"acc_mean": acc}, "spectral_gap": 0.05 if topology == "ring" else 1.0, "wall_seconds": 60.0,
         "seconds_per_round": 3.0,
         "config": {"seed": seed, "engine": {"local_steps": 5, "local_epochs": None, "gossip_steps": 1},
                    "data": {"batch_size": 32}, "optim": {"momentum": 0.9, "rho": 0.05, "sam": True}}}
    (path / "summary.json").write_text(json.dumps(s))


def test_report_writes_the_topology_table_for_round_runs(tmp_path):
    root = tmp_path / "sweep"
    fake_round_run(root / "0", "dfedsam", "ring", 0, 0.50, [0.0, 2.0, 1.0])
    fake_round_run(root / "1", "dfedsam", "ring", 1, 0.54, [0.0, 2.5, 1.5])
    fake_round_run(root / "2", "dfedsam_mgs", "ring", 0, 0.56, [0.0, 1.0, 0.5])
    fake_round_run(root / "3", "dfedsam_mgs", "ring", 1, 0.58, [0.0, 3.0, 0.5])   # above SAM at round 10
    fake_round_run(root / "4", "dpsgd", "complete", 0, 0.40, [0.0, 0.0, 0.0])
    (root / "5" / ".hydra").mkdir(parents=True)                                    # still running
    res = report(root)
    t = res["dfl_topology"]
    sam = t[(t.method == "dfedsam") & (t.topology == "ring")].iloc[0]
    assert sam.seeds == 2 and sam.acc_mean == pytest.approx(52.0) and sam.paper == 73.19
    assert sam.acc_std == pytest.approx(np.std([50, 54], ddof=1))
    md = (root / "dfl_topology.md").read_text()
    assert "## 16 clients, 20 rounds, batch 32 (K=5 local steps per round), cnn, CIFAR-10 (JPEG copy), dirichlet 0.3" in md
    assert "| method | ring | complete |" in md
    assert "| dfedsam | 52.00 ± 2.83 (n=2) / 73.19 | not run |" in md
    assert "| dpsgd | not run | 40.00 / 75.35 |" in md
    assert ("- ring, seed 0: MGS consensus distance below SAM's at 2 of 2 evaluated rounds; final local-test "
            "accuracy MGS 56.00 vs SAM 50.00; x_bar MGS 51.00 vs SAM 45.00") in md
    assert "- ring, seed 1: MGS consensus distance below SAM's at 1 of 2 evaluated rounds" in md
    assert "Incomplete runs" in md and "- 5" in md
    for f in ("rounds.csv", "dfl_topology.csv", "dfl_accuracy.png", "dfl_consensus.png"):
        assert (root / f).stat().st_size > 0
    assert not (root / "table1.md").exists()                 # no tick runs: no Table I


def test_a_report_of_other_methods_has_no_table1_filler():
    """Issue 39: runs of methods that are not Table I's (a user's algorithm, AD-PSGD) get their own
    rows with the final accuracy, not 64 'not run' cells of the paper's table."""
    import numpy as np
    import pandas as pd
    from vecgossip.report.tick import table1, table1_markdown
    runs = pd.DataFrame([dict(t_acq="10", R=1, N=20, k=8, topology="regular", method="adpsgd", data="iid", options="",
                              most_reach_tick=np.nan, ticks_run=30, wall_seconds=1.0, final_acc_mean=0.109)])
    t1 = table1(runs)
    assert len(t1) == 1 and t1.method.tolist() == ["adpsgd"]
    md = table1_markdown(t1)
    assert md.startswith("Runs (no paper value in Table I):") and "not run" not in md
    assert "| 10 | 1 | 20 | 8 | adpsgd | iid | 1/1 not reached by 30 | 10.9% |" in md


def test_a_round_report_without_a_paper_number_does_not_cite_the_paper(tmp_path):
    """Issue 39: an MNIST comparison is not set beside "the paper's CIFAR-10 number"."""
    fake_round_run(tmp_path / "0", "dfedsam", "ring", 0, 0.97, [0.0, 2.0, 1.0], data="MNIST")
    fake_round_run(tmp_path / "1", "dpsgd", "ring", 0, 0.95, [0.0, 2.0, 1.0], data="MNIST")
    report(tmp_path)
    md = (tmp_path / "dfl_topology.md").read_text()
    assert md.startswith("# Test accuracy (%) by topology") and "paper" not in md.split("##")[0].lower()
    assert "| dfedsam | 97.00 |" in md and "/ 73.19" not in md


def test_the_report_leaves_blank_the_knobs_an_algorithm_does_not_read(tmp_path):
    """Issue 39: AD-PSGD reads none of R, beta, correction, compression (summary.json's knobs_read,
    from the config's interpolations); its row leaves them blank instead of listing the defaults,
    while a gossip run beside it shows its own."""
    from vecgossip.config.knobs import consumed
    from vecgossip.config.schema import KNOBS
    read = {m: sorted(k for k in consumed(make([f"method={m}"])) if k in KNOBS) for m in ("adpsgd", "gossip")}
    assert {"R", "beta", "correction", "compression"} <= set(read["gossip"])
    assert not {"R", "beta", "correction", "compression"} & set(read["adpsgd"]) and "degree" in read["adpsgd"]
    root = tmp_path / "multirun"
    for i, method in enumerate(("adpsgd", "gossip")):
        fake_run(root / str(i), 10, 1, 20, 8, method, None, 0, None, ticks=30, beta=0.5)
        summary = json.loads((root / str(i) / "summary.json").read_text())
        (root / str(i) / "summary.json").write_text(json.dumps({**summary, "knobs_read": read[method]}))
    res = report(root)
    runs = res["runs"].set_index("method")
    assert runs.loc["adpsgd", ["beta", "correction", "compression"]].isna().all() and pd.isna(runs.loc["adpsgd", "R"])
    assert (runs.loc["gossip", "beta"], runs.loc["gossip", "R"]) == (0.5, 1)
    md = (root / "table1.md").read_text()
    assert "| 10 | - | 20 | 8 | adpsgd | iid |" in md and "| 10 | 1 | 20 | 8 | gossip | iid |" in md
    csv = pd.read_csv(root / "runs.csv").set_index("method")            # what a reader opens: blank cells
    assert csv.loc["adpsgd", ["beta", "correction", "compression", "R"]].isna().all()
    assert csv.loc["gossip", "beta"] == 0.5
