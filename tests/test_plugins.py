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
    assert tick.summary["data"] == "blobs" and tick.accuracy.shape == (5, 4)   # ticks 0, 50, 100, 150, 199
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


def test_unknown_keys_and_wrong_types_from_a_presets_yaml_stop_the_run(tmp_path):
    """A user's preset folder (on Hydra's search path) with a typo or a wrong type: one line, exit
    2, from the CLI; the same for the Python API (ConfigError)."""
    import subprocess
    import sys
    (tmp_path / "conf" / "experiment").mkdir(parents=True)
    (tmp_path / "conf" / "experiment" / "typo.yaml").write_text("# @package _global_\nmodel:\n  widht: 3\n")
    (tmp_path / "conf" / "experiment" / "wrongtype.yaml").write_text("# @package _global_\nengine:\n  max_ticks: lots\n")
    search = f"hydra.searchpath=[file://{tmp_path / 'conf'}]"
    for preset, message in (("typo", "unknown option model.widht; model takes: name, impl"),
                            ("wrongtype", "engine.max_ticks must be an integer >= 1, got 'lots'")):
        proc = subprocess.run([sys.executable, "-m", "vecgossip", search, f"+experiment={preset}",
                               f"hydra.run.dir={tmp_path / 'run'}"], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        with pytest.raises(vecgossip.ConfigError, match=message.split(":")[0]):
            vecgossip.compose(overrides=[search, f"+experiment={preset}"])
    assert not (tmp_path / "run").exists()


def tiny_net(in_shape, num_classes):
    """A user's model: any nn.Module factory (here with a BatchNorm, which the vmap path stacks)."""
    import math
    from torch import nn
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(in_shape), 16), nn.BatchNorm1d(16), nn.ReLU(),
                         nn.Linear(16, num_classes))


def test_a_registered_model_runs_on_both_engines_and_equals_a_plain_module(tmp_path):
    """The registered factory's module, one per node, gives the engine's evaluation logits (an
    independent reference: the plain module with the node's flat parameters loaded)."""
    from vecgossip.models import make_forward
    from vecgossip.core.state import Layout, flatten
    vecgossip.register_model("tiny", tiny_net)
    vecgossip.register_dataset("blobs2", features(300), features(100, seed=1))
    res = vecgossip.run("vc", run_dir=tmp_path / "t", overrides=["data.name=blobs2", "model.name=tiny"], nodes=4,
                        degree=2, max_ticks=300, eval_every=100, t_acq=1)
    assert res.metrics.acc_mean.iloc[-1] > res.metrics.acc_mean.iloc[0] + 0.1     # it learns (chance: 1/3)
    res = vecgossip.run("dfedavg", run_dir=tmp_path / "r", topology="ring", clients=4, rounds=3,
                        overrides=["data.name=blobs2", "model.name=tiny", "data.batch_size=16"])
    assert res.summary["model"] == "tiny"
    nets = [tiny_net((12,), 3).double().eval() for _ in range(3)]
    layout = Layout.of(tiny_net((12,), 3))
    theta = torch.stack([flatten(n) for n in nets])
    x = features(5)[0].double()
    forward = make_forward("tiny", "vmap", (12,), 3)
    got = forward(layout.views(theta, buffers=True), x.expand(3, *x.shape), train=False)   # + running statistics
    for i, net in enumerate(nets):
        assert torch.allclose(got[i], net(x), atol=1e-12)


def test_register_model_refuses_bad_factories():
    with pytest.raises(ValueError, match="not a built-in model"):
        vecgossip.register_model("lenet", tiny_net)
    with pytest.raises(ValueError, match="must return an nn.Module with parameters"):
        vecgossip.register_model("nothing", lambda shape, classes: torch.nn.Identity())
    with pytest.raises(ValueError, match="failed: TypeError"):
        vecgossip.register_model("wrongsig", lambda: None)


def test_registered_topologies_graph_edges_and_mixing_matrix(tmp_path):
    """A networkx graph factory, a fixed edge list and a mixing matrix W: each runs, and the round
    engine's gossip with a given W is that W (checked against W x computed here)."""
    import networkx as nx
    import numpy as np
    from vecgossip.network.mixing import MixingSchedule
    from vecgossip.network.topology import build
    vecgossip.register_topology("wheel", lambda n, seed: nx.wheel_graph(n))
    vecgossip.register_topology("path4", [(0, 1), (1, 2), (2, 3)])
    w = np.array([[0.5, 0.5, 0, 0], [0.5, 0.25, 0.25, 0], [0, 0.25, 0.5, 0.25], [0, 0, 0.25, 0.75]])
    vecgossip.register_topology("given_w", weights=w)
    vecgossip.register_dataset("blobs3", features(200), features(60, seed=1))
    assert sorted(map(tuple, build("wheel", 5).edges.tolist())) == sorted(tuple(sorted(e)) for e in nx.wheel_graph(5).edges)
    for topo in ("wheel", "path4"):
        res = vecgossip.run("vc", run_dir=tmp_path / topo, nodes=4, max_ticks=30, t_acq=1,
                            overrides=[f"topology.name={topo}", "data.name=blobs3", "model=mlp"])
        assert res.summary["n_nodes"] == 4
    res = vecgossip.run("dfedavg", run_dir=tmp_path / "w", clients=4, rounds=2,
                        overrides=["topology=ring", "topology.name=given_w", "data.name=blobs3", "model=mlp",
                                   "data.batch_size=8"])
    assert res.summary["topology"] == "given_w"
    import scipy.sparse as sp
    sched = MixingSchedule(graph=build("given_w", 4), weights=sp.csr_matrix(w), dtype=torch.float64)
    x = torch.randn(4, 3, dtype=torch.float64)
    op, _, w_sp = sched.at(0)
    assert np.allclose(w_sp.toarray(), w)
    from vecgossip.network.mixing import gossip
    out, _ = gossip(op, x.clone())
    assert torch.allclose(out, torch.from_numpy(w) @ x, atol=1e-14)


def test_registered_topologies_are_validated():
    import networkx as nx
    import numpy as np
    with pytest.raises(ValueError, match="not connected"):
        vecgossip.register_topology("split", [(0, 1), (2, 3)])
    with pytest.raises(ValueError, match="directed graph"):
        vecgossip.register_topology("arrows", nx.DiGraph([(0, 1), (1, 2), (2, 0)]))
    with pytest.raises(ValueError, match="row-stochastic"):
        vecgossip.register_topology("badw", weights=np.array([[0.5, 0.6], [0.5, 0.5]]))
    with pytest.raises(ValueError, match="not a built-in topology"):
        vecgossip.register_topology("ring", [(0, 1)])
    directed = np.array([[0.5, 0.5, 0.0], [0.0, 0.5, 0.5], [1.0, 0.0, 0.0]])          # row-, not column-stochastic
    vecgossip.register_topology("directed_w", weights=directed)
    with pytest.raises(vecgossip.ConfigError, match="needs a doubly stochastic W"):
        vecgossip.compose("dfedavg", clients=3, overrides=["topology=ring", "topology.name=directed_w"])
    with pytest.raises(vecgossip.ConfigError, match="the tick engine gossips along a graph"):
        vecgossip.compose("vc", nodes=3, overrides=["topology.name=directed_w"])
    vecgossip.register_topology("lonely", lambda n, seed: nx.empty_graph(n))
    with pytest.raises(vecgossip.ConfigError, match="topology=lonely is not connected"):
        vecgossip.compose("vc", nodes=3, overrides=["topology.name=lonely"])


# -- a tick-engine algorithm of one's own, found by its dotted path --------------------------------
from dataclasses import dataclass as _dataclass  # noqa: E402

from vecgossip.algorithms import TickAlgorithm  # noqa: E402


@_dataclass(frozen=True)
class HalfParams:
    weight: float = 0.25


class HalfGossip(TickAlgorithm):
    """Send whole models, merge full buffers by Eq. 1 with beta = ``weight``: written only with
    the documented services, it must be gossip learning with beta = weight exactly."""
    Params = HalfParams

    def after_train(self, ctx, t, senders, online):
        ctx.send_models(senders, online, t)
        ctx.average(t, online, self.params.weight, False)


def test_a_tick_algorithm_by_dotted_path_equals_the_built_in_it_restates(tmp_path):
    vecgossip.register_dataset("blobs4", features(200), features(60, seed=1))
    common = dict(nodes=6, degree=2, max_ticks=60, t_acq=[1, 4], eval_every=10)
    mine = vecgossip.run(vecgossip.compose(overrides=["data.name=blobs4", "model=mlp",
                                                      "algorithm._target_=test_plugins.HalfGossip",
                                                      "~algorithm.beta", "~algorithm.R", "~algorithm.correction",
                                                      "~algorithm.compression", "~algorithm.tl",
                                                      "+algorithm.weight=0.25"], **common), run_dir=tmp_path / "mine")
    ref = vecgossip.run("gossip", run_dir=tmp_path / "ref", beta=0.25, overrides=["data.name=blobs4", "model=mlp"],
                        **common)
    assert mine.summary["algorithm"] == "test_plugins.HalfGossip" and mine.summary["method_params"] == {"weight": 0.25}
    assert (tmp_path / "mine" / "metrics.csv").read_bytes() == (tmp_path / "ref" / "metrics.csv").read_bytes()
