"""The Python API as a notebook uses it (vecgossip.run / compose / Result), without Hydra's app."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import vecgossip


def test_run_a_method_by_name_returns_its_outputs(tmp_path, data_root):
    res = vecgossip.run("vc", nodes=8, degree=4, max_ticks=30, model="mlp", data_root=str(data_root),
                        run_dir=tmp_path / "vc")
    assert isinstance(res, vecgossip.Result) and res.run_dir == tmp_path / "vc"
    assert res.summary == json.loads((tmp_path / "vc" / "summary.json").read_text())
    assert res.summary["method"] == "vc" and res.summary["ticks_run"] == 30
    pd.testing.assert_frame_equal(res.metrics, pd.read_csv(tmp_path / "vc" / "metrics.csv"))
    assert np.array_equal(res.accuracy, np.load(tmp_path / "vc" / "accuracy.npy")) and res.accuracy.shape == (4, 8)   # ticks 0, 10, 20 and the end, 29
    again = vecgossip.run("vc", nodes=8, degree=4, max_ticks=30, model="mlp", data_root=str(data_root),
                          run_dir=tmp_path / "vc")                                   # finished: read back
    assert again.summary["wall_seconds"] == res.summary["wall_seconds"]


def test_compose_then_run_a_round_method_in_a_temporary_folder(data_root):
    cfg = vecgossip.compose("dfedsam", topology="ring", clients=4, rounds=2, local_steps=1, local_epochs=None,
                            model="mlp", data_root=str(data_root),
                            overrides=["data.global_test_size=40", "data.local_test_size=10", "optim.lr=0.05"])
    assert cfg.optim.lr == 0.05 and cfg.engine.name == "rounds" and cfg.topology.name == "ring"
    res = vecgossip.run(cfg)
    assert res.run_dir.exists() and res.summary["engine"] == "rounds" and res.accuracy.shape == (2, 4)
    assert res.summary["config"]["optim"]["lr"] == 0.05
    assert list(res.metrics["round"]) == [0, 2]                     # evaluated at the start and the end


def test_presets_and_bad_values(data_root):
    cfg = vecgossip.compose(experiment="table1", nodes=50, method="vc")
    assert cfg.name == "table1" and cfg.engine.early_stop is True and cfg.averaging.correction is True
    with pytest.raises(vecgossip.ConfigError, match=r"optim.rho \(rho\) must be a finite number >= 0, got -1"):
        vecgossip.compose("dfedsam", rho=-1)
    with pytest.raises(vecgossip.ConfigError, match="method=nosuch is unknown; allowed: adpsgd, "):
        vecgossip.compose("nosuch")
    with pytest.raises(TypeError, match="pass overrides to vecgossip.compose"):
        vecgossip.run(cfg, nodes=8)
