"""A plug-in's wrong return stops the run with one line naming the plug-in, the method and the shapes
(issue 49), not a traceback from deep in the engine: a robust rule whose reduction returns the
wrong number of rows, an attack whose forgery has the wrong shape. Through the CLI, exit code 2."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import vecgossip
from test_config import REPO
from test_plugins import features
from vecgossip.adversaries.attacks import Attack
from vecgossip.algorithms import RoundAlgorithm

vecgossip.register_dataset("plugin_error_blobs", features(300), features(60, seed=1))   # plugins=[this module]


class OneRowRule(RoundAlgorithm):
    """Gathers and returns one row for the whole block (a bug)."""

    def communicate(self, ctx, t, clients):
        ctx.state.theta.copy_(ctx.gather(ctx.state.theta, t, self.aggregate))
        return 0.0

    def aggregate(self, block):
        return block.own[:1]


class HalfAttack(Attack):
    """Forges only the first message slot (a bug)."""

    def forge(self, block, byzantine, honest, generator):
        return block.msgs[:, :1]


BASE = ["plugins=[test_plugin_errors]", "data.name=plugin_error_blobs", "model=mlp", "clients=6", "topology=ring",
        "rounds=2", "eval_every=2", "progress=false", "data.local_test_size=10", "data.global_test_size=30"]


@pytest.mark.parametrize("over,expect", [
    (["method=dpsgd", "algorithm._target_=test_plugin_errors.OneRowRule"],
     ["method test_plugin_errors.OneRowRule:", "test_plugin_errors.OneRowRule.aggregate returned (1, ", "for a block of 6 receivers"]),
    (["method=clipped_gossip", "adversary.nodes=1", "adversary.attack=test_plugin_errors.HalfAttack"],
     ["method vecgossip.algorithms.clipped_gossip.ClippedGossip:", "test_plugin_errors.HalfAttack.forge returned messages (6, 1, ", "messages are (6, 2, "]),
])
def test_a_plugins_wrong_return_is_one_line(tmp_path, over, expect):
    proc = subprocess.run([sys.executable, "-m", "vecgossip", *BASE, *over, f"hydra.run.dir={tmp_path}"], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "PYTHONPATH": str(REPO / "tests")})
    err = proc.stderr.strip()
    assert proc.returncode == 2 and len(err.splitlines()) == 1, err[-3000:]
    assert all(e in err for e in expect), err
