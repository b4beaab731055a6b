"""The public registration functions (issue 23, item 4), used as a researcher would: only names
exported by ``vecgossip``."""
from __future__ import annotations

import pytest
import torch

import vecgossip


def features(n: int, d: int = 12, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Linearly separable float features (not images): label = argmax of 3 fixed projections."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    y = (x @ torch.randn(d, 3, generator=torch.Generator().manual_seed(99))).argmax(1)
    return x, y


def test_a_registered_feature_data_set_trains_on_both_engines(tmp_path):
    vecgossip.register_dataset("blobs", features(300), features(100, seed=1), label="blobs")
    tick = vecgossip.run("vc", run_dir=tmp_path / "tick", overrides=["data.name=blobs", "model=mlp"], nodes=4,
                         degree=2, max_ticks=200, eval_every=50, t_acq=1)
    assert tick.summary["data"] == "blobs" and tick.accuracy.shape == (4, 4)   # ticks 0, 50, 100, 150
    assert tick.metrics.acc_mean.iloc[-1] > 0.6 > tick.metrics.acc_mean.iloc[0]      # 3 classes: chance 1/3
    rounds = vecgossip.run("dfedavg", run_dir=tmp_path / "rounds", topology="ring", clients=4, rounds=5,
                           overrides=["data.name=blobs", "model=mlp", "data.batch_size=16"])
    assert rounds.summary["engine"] == "rounds" and rounds.metrics.xbar_acc.iloc[-1] > 0.6


@pytest.mark.parametrize("train, message", [
    ((torch.zeros(5, 3), torch.zeros(4, dtype=torch.int64)), "features must be (M, ...) and labels (M,)"),
    ((torch.zeros(5, 3), torch.zeros(5)), "labels must be integers >= 0"),
    ((torch.zeros(5, 3), -torch.ones(5, dtype=torch.int64)), "labels must be integers >= 0"),
    ((torch.zeros(5, 4), torch.zeros(5, dtype=torch.int64)), "same shape per sample"),
    (torch.zeros(5, 3), "must be (features, labels)"),
])
def test_register_dataset_refuses_bad_input_in_one_line(train, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        vecgossip.register_dataset("bad", train, (torch.zeros(2, 3), torch.zeros(2, dtype=torch.int64)))


def test_register_dataset_keeps_the_built_ins_and_checks_classes():
    with pytest.raises(ValueError, match="'mnist' is a built-in data set"):
        vecgossip.register_dataset("mnist", features(10), features(10))
    with pytest.raises(ValueError, match="labels must be < num_classes=2"):
        vecgossip.register_dataset("few", features(30), features(10), num_classes=2)
