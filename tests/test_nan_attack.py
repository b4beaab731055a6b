"""A robust rule survives any message (issue 49): an attack of one's own that sends NaN (by dotted
path, as a user writes it) breaks plain D-PSGD within a round, and none of the robust rules
(ClippedGossip adaptive and fixed, trimmed mean, median, BALANCE): a non-finite message is the worst
message, dropped (Block.finite)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import vecgossip
from vecgossip.adversaries.attacks import Attack, replace

BASE = ["data.name=nan_blobs", "model=mlp", "clients=8", "topology=ring", "rounds=3", "eval_every=3",
        "data.local_test_size=10", "data.global_test_size=60", "progress=false", "adversary.nodes=2",
        "adversary.attack=test_nan_attack.NaNAttack"]


@pytest.fixture(autouse=True)
def blobs():
    from test_plugins import features
    vecgossip.register_dataset("nan_blobs", features(800), features(200, seed=1))


class NaNAttack(Attack):
    """Every Byzantine message is NaN."""

    def forge(self, block, byzantine, honest, generator):
        return replace(block, byzantine, torch.full_like(block.own, float("nan")))


@pytest.mark.parametrize("method,extra", [("clipped_gossip", []), ("clipped_gossip", ["algorithm.tau=0.1"]),
                                          ("trimmed_mean", []), ("median", []), ("balance", [])])
def test_robust_rules_drop_non_finite_messages(tmp_path, method, extra):
    r = vecgossip.run(method, run_dir=tmp_path, overrides=[*BASE, *extra])
    assert r.summary["diverged"] is None and r.summary["clients_diverged"] == 0
    assert np.isfinite(r.metrics["acc_mean"]).all() and r.metrics["acc_mean"].iloc[-1] > 0.3


def test_plain_gossip_takes_the_nan(tmp_path):
    with pytest.raises(vecgossip.DivergedRun, match="diverged"):
        vecgossip.run("dpsgd", run_dir=tmp_path, overrides=[*BASE])
