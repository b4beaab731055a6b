"""A small real-MNIST run end to end through the config and sim.run: it learns, and writes every
output file with the promised columns and keys."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from test_config import make
from vecgossip.sim import run


def test_small_real_mnist_run_learns(data_root, tmp_path):
    cfg = make(["+experiment=vc", "nodes=8", "degree=4", "max_ticks=300", "early_stop=false",
                f"data_root={data_root}", "progress=false"])
    summary = run(cfg, tmp_path)
    df = pd.read_csv(tmp_path / "metrics.csv")
    assert list(df.tick) == list(range(0, 300, 10))
    for col in ["tick", "acc_mean", "acc_min", "acc_max", "frac_reached", "loss_mean"] + \
               [f"{p}_{l}" for l in ("conv1", "conv2", "ip1", "ip2") for p in ("var", "wdiff")]:
        assert col in df.columns, col
    acc = np.load(tmp_path / "accuracy.npy")
    assert acc.shape == (30, 8)
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
    from vecgossip.engines.tick import History
    from vecgossip.sim import periodic_flush
    hist = History(rows=[{"tick": 0, "acc_mean": 0.1}, {"tick": 10, "acc_mean": 0.2}])
    periodic_flush(tmp_path, every_s=3600)(hist)
    assert not (tmp_path / "metrics.csv").exists()          # not yet due
    periodic_flush(tmp_path, every_s=-1)(hist)
    assert list(pd.read_csv(tmp_path / "metrics.csv").tick) == [0, 10]
    assert not list(tmp_path.glob(".metrics.csv*"))          # no temp file left behind
