"""A small real-MNIST run end to end through the config and sim.run: it learns, and writes every
output file with the promised columns and keys."""
from __future__ import annotations

import json

import numpy as np
import pytest
import pandas as pd

from test_config import make
from vecgossip.composition.root import run


def test_small_real_mnist_run_learns(data_root, tmp_path):
    cfg = make(["+experiment=vc", "nodes=8", "degree=4", "max_ticks=300", "early_stop=false",
                f"data_root={data_root}", "progress=false"])
    summary = run(cfg, tmp_path)
    df = pd.read_csv(tmp_path / "metrics.csv")
    assert list(df.tick) == [*range(0, 300, 10), 299]                       # and the final state
    for col in ["tick", "acc_mean", "acc_min", "acc_max", "frac_reached", "loss_mean"] + \
               [f"{p}_{l}" for l in ("conv1", "conv2", "ip1", "ip2") for p in ("var", "wdiff")]:
        assert col in df.columns, col
    acc = np.load(tmp_path / "accuracy.npy")
    assert acc.shape == (31, 8)
    assert df.acc_mean.iloc[0] < 0.25            # chance at the start
    assert df.acc_mean.iloc[-1] > 0.6            # well above chance after 30 SGD steps per node
    assert df.loss_mean.iloc[-1] < df.loss_mean.iloc[0] - 0.5
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    for key in ("first_reach_tick", "most_reach_tick", "plateau_delay_tick", "ticks_run", "wall_seconds",
                "n_nodes", "name"):
        assert key in on_disk
    assert on_disk["n_nodes"] == 8 and on_disk["ticks_run"] == 300 and on_disk["name"] == "vc"
    assert on_disk["first_reach_tick"] == summary["first_reach_tick"]
    for png in ("accuracy.png", "variance.png", "weight_difference.png"):
        assert (tmp_path / png).stat().st_size > 10_000
    # variance correction keeps each layer's mean weight variance near its initial value
    for layer in ("conv1", "conv2", "ip1", "ip2"):
        ratio = df[f"var_{layer}"].iloc[-1] / df[f"var_{layer}"].iloc[0]
        assert 0.5 < ratio < 2.0


def test_same_seed_same_run(data_root, tmp_path):
    over = ["model=mlp", "nodes=6", "degree=3", "t_acq=[1,5]", "max_ticks=60", f"data_root={data_root}",
            "progress=false"]
    a = run(make(over))["_history"]
    b = run(make(over))["_history"]
    c = run(make(over + ["seed=1"]))["_history"]
    assert np.array_equal(np.stack(a.acc), np.stack(b.acc))
    assert not np.array_equal(np.stack(a.acc), np.stack(c.acc))


def test_initial_variance_is_recorded_before_any_averaging(data_root, tmp_path):
    """Caffe xavier: variance 1/fan_in per layer at initialisation (fan_in 25, 500, 800, 500)."""
    cfg = make(["nodes=6", "degree=3", "max_ticks=1", f"data_root={data_root}", "progress=false"])
    s = run(cfg, tmp_path)
    init = s["initial_layer_variance"]
    for layer, fan in zip(("conv1", "conv2", "ip1", "ip2"), (25, 500, 800, 500)):
        assert abs(init[f"var_{layer}"] * fan - 1) < 0.1
    # after one training step and one Eq. 1 average of 3 independent neighbours (beta 0.5) the
    # variance falls to about (0.25 + 0.25/3) = 1/3 of it (Proposition 1)
    df = pd.read_csv(tmp_path / "metrics.csv")
    assert abs(df.var_ip1.iloc[0] / init["var_ip1"] - 1 / 3) < 0.05


def test_periodic_flush_writes_partial_metrics(tmp_path):
    from vecgossip.engines.tick.state import History
    from vecgossip.composition.root import periodic_flush
    hist = History(rows=[{"tick": 0, "acc_mean": 0.1}, {"tick": 10, "acc_mean": 0.2}])
    periodic_flush(tmp_path, every_s=3600)(hist)
    assert not (tmp_path / "metrics.csv").exists()          # not yet due
    periodic_flush(tmp_path, every_s=-1)(hist)
    assert list(pd.read_csv(tmp_path / "metrics.csv").tick) == [0, 10]
    assert not list(tmp_path.glob(".metrics.csv*"))          # no temp file left behind


def test_round_engine_learns_on_real_mnist(data_root, tmp_path):
    """DFedAvgM, 4 clients on a ring with Dirichlet shards: writes every output and learns."""
    cfg = make(["method=dfedavgm", "topology=ring", "clients=4", "rounds=6", "local_steps=10", "local_epochs=null",
                "eval_every=3", "alpha=0.5", "data.batch_size=32", "optim.lr=0.02", "data.global_test_size=200",
                f"data_root={data_root}", "progress=false"])
    s = run(cfg, tmp_path)
    df = pd.read_csv(tmp_path / "metrics.csv")
    assert list(df["round"]) == [0, 3, 6]
    for col in ("acc_mean", "acc_min", "acc_max", "global_acc_mean", "xbar_acc", "train_loss_mean",
                "consensus_distance", "bytes_per_client", "bytes_cumulative", "lr"):
        assert col in df.columns, col
    assert df.acc_mean.iloc[0] < 0.3 and df.acc_mean.iloc[-1] > 0.7 and df.xbar_acc.iloc[-1] > 0.6
    model_bytes = 431_080 * 4
    assert df.bytes_per_client.iloc[-1] == 2 * model_bytes                  # ring: degree 2, Q = 1
    assert df.bytes_cumulative.iloc[-1] == 6 * 2 * model_bytes
    assert df.lr.iloc[-1] == pytest.approx(0.02 * 0.998 ** 5)
    assert np.load(tmp_path / "accuracy.npy").shape == (3, 4)
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["engine"] == "rounds" and on_disk["method"] == "dfedavgm" and on_disk["rounds_run"] == 6
    assert on_disk["spectral_gap"] == pytest.approx(1 - (1 / 3 + 2 / 3 * np.cos(2 * np.pi / 4)))
    assert on_disk["final"]["acc_mean"] == s["final"]["acc_mean"] and on_disk["data"] == "MNIST"
    for png in ("accuracy.png", "consensus.png"):
        assert (tmp_path / png).stat().st_size > 10_000


def test_cifar_runs_on_both_engines(data_root, tmp_path):
    """The data registry feeds both engines: paper 2's CPU preset shrunk, and paper 1's tick engine
    with LeNet on CIFAR-10 (JPEG copy), by configuration only."""
    if not (data_root / "CIFAR-10-images").is_dir():
        pytest.skip("no CIFAR-10 copy under the data root")
    s = run(make(["+experiment=dfedsam_cpu", "topology=ring", "clients=4", "rounds=2", "local_steps=2",
                  "eval_every=1", "data.local_test_size=50", "data.global_test_size=100", f"data_root={data_root}",
                  "progress=false"]), tmp_path / "rounds")
    assert s["data"] == "CIFAR-10 (JPEG copy)" and s["model_params"] == 878_538 and s["local_test_size"] == 50
    assert len(pd.read_csv(tmp_path / "rounds" / "metrics.csv")) == 3
    t = run(make(["+experiment=vc", "data=cifar10", "nodes=4", "degree=2", "max_ticks=21", f"data_root={data_root}",
                  "progress=false"]), tmp_path / "tick")
    assert t["data"] == "CIFAR-10 (JPEG copy)" and t["ticks_run"] == 21
    assert np.load(tmp_path / "tick" / "accuracy.npy").shape == (3, 4)


def test_save_models_and_a_failing_plot_loses_nothing(data_root, tmp_path, monkeypatch):
    """save_models=true writes models.pt that loads back into plain modules; a plot that raises is
    reported in summary.json and every other output is still written."""
    import torch
    from vecgossip.runtime import outputs
    from vecgossip.core.state import flatten
    from vecgossip.models.saved import load_models

    def broken(*a, **k):
        raise RuntimeError("no display")
    monkeypatch.setattr(outputs, "plot_layers", broken)
    import vecgossip.composition.tick as tick_setup
    monkeypatch.setattr(tick_setup, "plot_layers", broken)
    run(make(["model=mlp", "nodes=6", "degree=3", "max_ticks=21", "save_models=true", f"data_root={data_root}",
                  "progress=false"]), tmp_path)
    mods = load_models(tmp_path / "models.pt")
    theta = torch.load(tmp_path / "models.pt", weights_only=False)["theta"]
    assert len(mods) == 6 and torch.equal(flatten(mods[4]), theta[4])
    assert mods[0](torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert [e.split(":")[0] for e in on_disk["plot_errors"]] == ["variance.png", "weight_difference.png"]
    assert (tmp_path / "accuracy.png").exists() and (tmp_path / "metrics.csv").exists()
