"""Paper 2's configs: every method picks its engine, presets carry the paper's settings, and every
bad input stops before any work with a message naming the option as the user types it."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from hydra.errors import ConfigCompositionException

from test_config import REPO, make
from vecgossip.core.errors import ConfigError
from vecgossip.composition.root import run, validate

ROUND_METHODS = ("dpsgd", "dfedavg", "dfedavgm", "dfedsam", "dfedsam_mgs", "fedavg", "fedsam")
TICK_METHODS = ("gossip", "vc", "compression", "tl", "tl_compression", "fedavg_tick")


@pytest.mark.parametrize("method", ROUND_METHODS + TICK_METHODS)
def test_the_method_picks_the_engine(method):
    cfg = make([f"method={method}"])
    validate(cfg)
    assert cfg.engine.name == ("rounds" if method in ROUND_METHODS else "tick")
    assert cfg.method_name == method


def test_method_settings_are_the_papers():
    want = {  # (K, Q, momentum, sam, server, participation)
        "dpsgd": (1, 1, 0.0, False, False, 1.0), "dfedavg": (None, 1, 0.0, False, False, 1.0),
        "dfedavgm": (None, 1, 0.9, False, False, 1.0), "dfedsam": (None, 1, 0.9, True, False, 1.0),
        "dfedsam_mgs": (None, 4, 0.9, True, False, 1.0), "fedavg": (None, 1, 0.0, False, True, 0.1),
        "fedsam": (None, 1, 0.0, True, True, 0.1)}
    algos = {"dpsgd": "DPSGD", "dfedavg": "DFedAvg", "dfedavgm": "DFedAvg", "dfedsam": "DFedSAM",
             "dfedsam_mgs": "DFedSAM", "fedavg": "FedAvg", "fedsam": "FedAvg"}   # presets share a file
    for method, (k, q, mom, sam, server, part) in want.items():
        assert make([f"method={method}"]).algorithm._target_ == f"vecgossip.algorithms.{algos[method].lower()}.{algos[method]}"
        c = make([f"method={method}"])
        algo = c.algorithm._target_.rsplit(".", 1)[1]
        sam_ = c.optim.sam or algo == "DFedSAM"                # DFedSAM's local steps are SAM steps
        got = (c.engine.local_steps, c.engine.gossip_steps, c.optim.momentum, sam_, algo == "FedAvg",
               c.engine.participation)
        assert got == (k, q, mom, sam, server, part), method
        assert (c.optim.lr, c.optim.lr_decay, c.optim.weight_decay, c.optim.rho) == (0.1, 0.998, 5e-4, 0.05)
        assert c.data.batch_size == 128 and c.model.shared_init is True and c.model.init == "torch"
        assert c.engine.local_epochs == (None if method == "dpsgd" else 5)


def test_paper_preset():
    c = make(["+experiment=dfedsam"])
    assert (c.topology.n, c.data.name, c.data.alpha, c.engine.local_epochs, c.data.batch_size, c.engine.rounds,
            c.topology.name, c.topology.k) == (100, "cifar10", 0.3, 5, 128, 1000, "random", 10)
    c = make(["+experiment=dfedsam_topology_cpu", "method=dpsgd", "topology=ring"])
    assert c.engine.local_steps == 1 and c.topology.n == 16          # D-PSGD stays one local step


def expect_error(overrides, match):
    with pytest.raises(ConfigError, match=match):
        validate(make(overrides))


def test_unknown_method_topology_and_dataset_name_the_group():
    for over, group in (("method=dfedprox", "method"), ("topology=torus", "topology"), ("data=svhn", "data")):
        with pytest.raises(ConfigCompositionException, match=f"Could not find '{group}/"):
            make([over])


def test_clients_that_fit_no_grid():
    expect_error(["method=dfedavg", "topology=grid", "clients=13"],
                 "topology=grid needs topology.n \\(clients\\).*13 fits no such grid; nearest: 12 \\(3x4\\) or 15")


def test_gossip_steps_below_one():
    expect_error(["method=dfedsam_mgs", "gossip_steps=0"], "engine.gossip_steps \\(gossip_steps\\) must be an integer >= 1")


def test_negative_rho():
    expect_error(["method=dfedsam", "rho=-0.01"], "optim.rho \\(rho\\) must be a finite number >= 0")


@pytest.mark.parametrize("value", ["0", "1.5", "-0.1"])
def test_participation_outside_zero_one(value):
    expect_error(["method=fedavg", f"participation={value}"], "engine.participation \\(participation\\) must be a number in \\(0, 1\\]")


@pytest.mark.parametrize("value", ["0", "-0.3"])
def test_alpha_not_positive(value):
    expect_error(["method=dfedavg", f"alpha={value}"], "data.alpha \\(alpha\\) must be null or a finite number > 0")


def test_more_clients_than_samples():
    expect_error(["method=dfedavg", "topology=ring", "clients=60001"],
                 "topology.n \\(clients\\)=60001 is more than the 60000 training samples of data=mnist")


def test_exactly_one_of_local_steps_and_epochs():
    expect_error(["method=dfedavg", "local_steps=3"], "set exactly one of engine.local_steps")


def test_alpha_with_a_partition_it_does_not_shape():
    expect_error(["method=dfedavg", "partition=iid", "alpha=0.3"], "data.alpha \\(alpha\\)=0.3 has no effect")


def test_cifar_root_holding_neither_format_stops_before_any_work(tmp_path, monkeypatch):
    from vecgossip.data import registry as datasets
    monkeypatch.setattr(datasets, "LOADERS", {})                   # any load attempt would KeyError
    cfg = make(["method=dfedavg", "data=cifar10", "model=cnn", f"data_root={tmp_path}", "data.download=false"])
    with pytest.raises(ConfigError, match="CIFAR-10 not found under data.root=.*cifar-10-batches-py.*CIFAR-10-images"):
        run(cfg)


def test_offline_download_fails_fast_saying_where_the_files_go(tmp_path, monkeypatch):
    """data.download=true is the default: where the files are missing and the download fails (no
    internet), the run stops before any state exists, naming data.root and the layout."""
    from torchvision.datasets import MNIST

    def offline(self):
        raise RuntimeError("Error downloading train-images-idx3-ubyte.gz: <urlopen error [Errno -3] Temporary "
                           "failure in name resolution>")
    monkeypatch.setattr(MNIST, "download", offline)
    cfg = make(["model=mlp", f"data_root={tmp_path}", "progress=false"])
    assert cfg.data.download is True
    with pytest.raises(ConfigError, match=r"MNIST not found under data.root=.*MNIST/raw.*download failed: no "
                                          r"network \(\[Errno -3\] Temporary failure in name resolution\)"):
        run(cfg)


def test_cli_bad_value_is_one_line_and_exit_code_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "vecgossip", "method=dfedsam", "rho=-1",
                           f"hydra.run.dir={tmp_path}"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "vecgossip: error: optim.rho (rho) must be a finite number >= 0, got -1"
    assert "Traceback" not in proc.stdout + proc.stderr


def test_random_topology_needs_the_round_engine():
    expect_error(["topology=random"], "topology=random draws a new graph every round: it needs a round-engine method")


def test_default_job_runs_gossip_and_vc_side_by_side(data_root, tmp_path):
    """`python -m vecgossip` alone: both methods, capped, each in a subfolder, and the report over
    them; choosing a method runs it alone."""
    base = [sys.executable, "-m", "vecgossip", "model=mlp", "nodes=6", "degree=3", "compare_ticks=40",
            f"data_root={data_root}", "progress=false"]
    proc = subprocess.run([*base, f"hydra.run.dir={tmp_path / 'demo'}"], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for m in ("gossip", "vc"):
        s = json.loads((tmp_path / "demo" / m / "summary.json").read_text())
        assert s["method"] == m and s["ticks_run"] == 40
        assert f"default job, run {('gossip', 'vc').index(m) + 1} of 2: {m} -> {tmp_path / 'demo' / m}" in proc.stdout
    assert (tmp_path / "demo" / "accuracy_bands.png").exists() and (tmp_path / "demo" / "table1.md").exists()
    table = (tmp_path / "demo" / "table1.md").read_text()
    assert "Incomplete runs" not in table and table.count("not reached by 40") == 2   # both runs; the parent is no job
    broken = tmp_path / "demo" / "broken" / ".hydra"        # a real job that died: still listed
    shutil.copytree(tmp_path / "demo" / ".hydra", broken)
    (broken / "overrides.yaml").write_text("- method=vc\n")
    from vecgossip.report.tick import report
    res = report(tmp_path / "demo", tmp_path / "again")
    assert res["incomplete"] == ["broken"], res["incomplete"]
    proc = subprocess.run([*base, "method=vc", "max_ticks=30", f"hydra.run.dir={tmp_path / 'one'}"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and json.loads((tmp_path / "one" / "summary.json").read_text())["ticks_run"] == 30
    assert not (tmp_path / "one" / "vc").exists()                 # a chosen method runs alone
