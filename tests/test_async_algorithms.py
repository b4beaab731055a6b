"""Two asynchronous algorithms that were not built in, written on the public interface only
(issue 55, item 5): staleness-discounted gossip (FedAsync's (1 + tau)^-a per message) and
Epidemic Learning without rounds, each against the per-message twin (tests/reference/
push_seconds.py) on random speeds, slow uplinks (messages queue and overtake) and latency, both
link policies: the same models (float64, 1e-10), steps and messages received; and the staleness
weight by hand."""
from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest
import torch

import reference.push_seconds
from test_clock_tick import N, TickSetting, algorithm_engine, mlp_setting, model_bytes, random_timing, seconds_of

ALGORITHMS = Path(__file__).resolve().parents[1] / "vecgossip" / "algorithms"


def staleness_engine(graph, data, layout, init, seed, cfg, a=0.5, **kw):
    from vecgossip.algorithms.staleness_gossip import Params, StalenessGossip
    return algorithm_engine(StalenessGossip(Params(a)), graph, data, layout, init, seed, cfg, **kw)


def el_engine(graph, data, layout, init, seed, cfg, s=2, **kw):
    from vecgossip.algorithms.el_async import EpidemicAsync, Params
    return algorithm_engine(EpidemicAsync(Params(s)), graph, data, layout, init, seed, cfg, **kw)


def one_neighbour(nbrs):
    """staleness_gossip's draw, restated: the neighbour at floor(u x degree) of the ascending list."""
    return lambda rng, due: [[nbrs[i][int(math.floor(u * len(nbrs[i])))]] for i, u in zip(due, rng.random(len(due)))]


def s_of_all(s):
    """el_async's draw, restated: s of the n - 1 others by the smallest of n - 1 uniform keys."""
    def draw(rng, due):
        keys = rng.random((len(due), N - 1))
        out = []
        for i, k in zip(due, keys):
            others = [j for j in range(N) if j != i]
            out.append(sorted(others[c] for c in sorted(range(N - 1), key=lambda c: k[c])[:s]))
        return out
    return draw


@pytest.mark.parametrize("name, seed, policy", [("staleness", 0, "fair"), pytest.param("staleness", 1, "fifo", marks=pytest.mark.slow),
                                               pytest.param("el", 2, "fair", marks=pytest.mark.slow), ("el", 3, "fifo")])
def test_the_algorithm_matches_its_per_message_twin(name, seed, policy):
    (graph, data, layout, init), size, step, up, lat, clock = random_timing(seed, 700, policy=policy)
    cfg = TickSetting(batch_size=16)
    make = staleness_engine if name == "staleness" else el_engine
    engine = make(graph, data, layout, init, seed, cfg, seconds=clock)
    ref = make(graph, data, layout, init, seed, cfg)
    windows = 40
    for t in range(windows):
        engine.tick(t)
    nbrs = [sorted(graph.to_networkx().neighbors(i)) for i in range(N)]
    recipients = one_neighbour(nbrs) if name == "staleness" else s_of_all(2)
    weigh = (lambda tau: (1.0 + tau) ** -0.5) if name == "staleness" else (lambda tau: 1.0)
    want, iters, got = reference.push_seconds.run(make(graph, data, layout, init, seed, cfg), ref, recipients, weigh,
                                                  list(step), list(up), list(up), lat.tolist(), size, 0.5, windows,
                                                  policy)
    assert engine.state.iters.tolist() == iters and min(iters) >= 9
    assert engine.transport.received.tolist() == got and sum(got) > 3 * N
    rel = (engine.state.theta - want).norm(dim=1) / want.norm(dim=1)
    assert rel.max() <= 1e-10, rel


def test_the_staleness_weight_by_hand():
    """FedAsync's weight (1 + tau)^-a by hand: a model 4 s in flight counts 5^-0.5, 1 s 2^-0.5, a
    fresh one 1; a = 0 weighs every message 1 (plain push gossip)."""
    from vecgossip.algorithms.staleness_gossip import Params, StalenessGossip
    w = StalenessGossip(Params(0.5)).arrival_weight(np.array([4.0, 1.0, 0.0]))
    np.testing.assert_allclose(w, [5 ** -0.5, 2 ** -0.5, 1.0], rtol=1e-15)
    assert StalenessGossip(Params(0.0)).arrival_weight(np.array([7.0])).tolist() == [1.0]


@pytest.mark.parametrize("file", ["staleness_gossip.py", "el_async.py"])
def test_written_on_the_public_interface_in_at_most_60_lines(file):
    import vecgossip.algorithms as public
    text = (ALGORITHMS / file).read_text()
    assert len(text.splitlines()) <= 60
    tree = ast.parse(text)
    imported = [(n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
                and n.module.startswith("vecgossip") for a in n.names]
    assert imported and all(m in ("vecgossip.algorithms", "vecgossip.algorithms.base") and a in public.__all__
                            for m, a in imported), imported


def test_a_bad_arrival_weight_stops_in_one_line():
    from vecgossip.algorithms.staleness_gossip import StalenessGossip
    from vecgossip.core.errors import ConfigError

    class Bad(StalenessGossip):
        def arrival_weight(self, staleness):
            return -np.ones_like(staleness)
    graph, data, layout, init = mlp_setting(0)
    eng = algorithm_engine(Bad(), graph, data, layout, init, 0, TickSetting(batch_size=16),
                           seconds=seconds_of(1.0, model_bytes(layout) / 0.3, None, 0.0, "fair", 0.5))
    with pytest.raises(ConfigError, match=r"arrival_weight must return one finite weight >= 0 per message"):
        for t in range(10):
            eng.tick(t)
    assert torch.isfinite(eng.state.theta).all()
