"""Adversaries on the tick engine (issue 49): what Byzantine senders put into their receivers'
buffers against a per-link loop written with numpy (sign flip, a user's attack that forges per
receiver, mimic's global view), label flipping against a run whose labels are flipped by hand,
honest-only metrics, replicas = separate runs, an attack's own options (adversary.params) checked
like an algorithm's, and the robust merge (method=robust_gossip) against its per-node loop twin
(tests/reference/robust.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import vecgossip
from conftest import comparable
from reference import robust
from test_services import TICK, tick_engine
from vecgossip.adversaries import Attack

F64 = torch.float64
BYZ = [1, 4]


class OwnCopy(Attack):
    """A user's attack that forges per receiver: each Byzantine message is the receiver's own model
    times two (what no single broadcast could send)."""

    def forge(self, block, byzantine, honest, generator):
        own = block.own.unsqueeze(1).expand_as(block.msgs)
        return torch.where(byzantine.view(*byzantine.shape, *[1] * (block.msgs.dim() - 2)), 2 * own, block.msgs)


def engine_with(*extra):
    e = tick_engine(["degree=4", *extra])
    e.state.theta.copy_(torch.randn(e.state.theta.shape, generator=torch.Generator().manual_seed(3), dtype=F64))
    return e


def buffers_by_loop(e, forged) -> tuple[np.ndarray, np.ndarray]:
    """Every link j -> i of the active links (a_full: receiver by sender), one at a time: the
    receiver's buffer gets x_j, or ``forged(i, j)`` when j is Byzantine."""
    a = e.wiring.a_full.toarray()
    x = e.state.theta.numpy()
    total, count = np.zeros_like(x), np.zeros(x.shape[0])
    for i in range(x.shape[0]):
        for j in range(x.shape[0]):
            if a[i, j]:
                total[i] += forged(i, j) if j in BYZ else x[j]
                count[i] += 1
    return total, count


@pytest.mark.parametrize("attack,forged", [
    ("sign_flip", lambda x, i, j: -x[j]),
    ("test_tick_adversary.OwnCopy", lambda x, i, j: 2 * x[i]),
    ("mimic", lambda x, i, j: x[0]),                    # the lowest-indexed honest node, for everyone
])
def test_byzantine_senders_fill_buffers_as_a_per_link_loop(attack, forged):
    e = engine_with(f"adversary.nodes={BYZ}".replace(" ", ""), f"adversary.attack={attack}")
    x = e.state.theta.clone().numpy()
    senders = np.arange(e.state.n)
    e.transport.send(senders, None, 1)
    total, count = buffers_by_loop(e, lambda i, j: forged(x, i, j))
    assert count.sum() > 0 and all(e.wiring.a_full[:, b].nnz for b in BYZ)      # Byzantine links exist
    assert np.allclose(e.buffers.total.numpy(), total, rtol=1e-12, atol=1e-12)
    assert e.buffers.count.numpy().tolist() == count.tolist() and e.buffers.held.tolist() == count.tolist()


def test_mimic_copies_a_target_that_is_no_neighbour_and_refuses_a_byzantine_one(tmp_path):
    e = engine_with("adversary.nodes=[1,4]", "adversary.attack=mimic", "+adversary.params.target=3")
    a = e.wiring.a_full.toarray()
    receivers = [i for i in range(6) if a[i, 1] or a[i, 4]]
    assert any(not a[i, 3] and i != 3 for i in receivers)         # a receiver that never hears node 3 ...
    x = e.state.theta.clone().numpy()
    e.transport.send(np.arange(6), None, 1)
    total, _ = buffers_by_loop(e, lambda i, j: x[3])              # ... gets node 3's model from a Byzantine one
    assert np.allclose(e.buffers.total.numpy(), total, rtol=1e-12, atol=1e-12)
    with pytest.raises(vecgossip.ConfigError, match=r"adversary.params.target=1 is a Byzantine node"):
        vecgossip.run(vecgossip.compose(overrides=[*TICK, "adversary.nodes=[1,4]", "adversary.attack=mimic",
                                                   "+adversary.params.target=1"]), run_dir=tmp_path / "m")


def test_label_flipping_nodes_train_on_flipped_labels_and_the_others_do_not():
    """One training tick of the label-flipping engine against two plain engines from the same
    state and draws, one of them with every label flipped by hand (C - 1 - y)."""
    flip = engine_with("adversary.nodes=[1,4]", "adversary.attack=label_flip")
    plain, flipped = engine_with(), engine_with()
    flip.sgd_step(np.arange(6))
    plain.sgd_step(np.arange(6))
    data = flipped.train_data
    batch = data.train_batch
    data.train_batch = lambda *a: (lambda xy: (xy[0], data.num_classes - 1 - xy[1]))(batch(*a))
    try:
        flipped.sgd_step(np.arange(6))
    finally:
        del data.train_batch
    got, honest = flip.state.theta, [0, 2, 3, 5]
    assert torch.equal(got[honest], plain.state.theta[honest])
    assert torch.equal(got[BYZ], flipped.state.theta[BYZ])
    assert not torch.equal(got[BYZ], plain.state.theta[BYZ])


def test_a_tick_run_under_attack_reports_the_honest_nodes_only(tmp_path):
    res = vecgossip.run(vecgossip.compose(overrides=[*TICK, "degree=4", "adversary.nodes=[1,4]",
                                                     "adversary.attack=sign_flip"]), run_dir=tmp_path / "r")
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["adversary"] == {"attack": "sign_flip", "byzantine": [1, 4]}
    acc = np.load(tmp_path / "r" / "accuracy.npy")
    assert acc.shape[1] == 4                                      # the honest nodes' columns
    last = res.metrics.iloc[-1]
    assert last["acc_mean"] == pytest.approx(float(np.mean(acc[-1])), abs=1e-6)
    assert last["acc_min"] == pytest.approx(float(np.min(acc[-1])), abs=1e-6)


@pytest.mark.parametrize("attack", ["alie", "label_flip"])
def test_tick_replicas_under_attack_equal_separate_runs(tmp_path, attack):
    from test_replicas import files
    base = [*TICK, "degree=4", "adversary.nodes=2", f"adversary.attack={attack}", "t_acq=[2,8]"]
    vecgossip.run(vecgossip.compose(overrides=[*base, "replicas=2"]), run_dir=tmp_path / "batch")
    for s in range(2):
        vecgossip.run(vecgossip.compose(overrides=[*base, f"seed={s}"]), run_dir=tmp_path / f"seed{s}")
        got, want = files(tmp_path / "batch" / f"replica{s}"), files(tmp_path / f"seed{s}")
        assert got == want, f"replica {s}"


@pytest.mark.parametrize("extra,match", [
    (["adversary.attack=mimic", "+adversary.params.target=abc"],
     r"adversary.params.target must be an integer or null, got .abc."),
    (["adversary.attack=mimic", "+adversary.params.targett=2"],
     r"unknown option adversary.params.targett.*target"),
    (["adversary.attack=sign_flip", "+adversary.params.target=2"],
     r"unknown option adversary.params.target; .*SignFlip takes no options of its own"),
    (["adversary.attack=sign_flip", "method=tl_compression"], r"compression=0.2\) are not attacked"),
    (["adversary.attack=sign_flip", "faults.drop=0.1"], r"the tick engine does not combine them"),
])
def test_tick_adversary_options_are_checked_in_one_line(tmp_path, extra, match):
    with pytest.raises(vecgossip.ConfigError, match=match):
        vecgossip.run(vecgossip.compose(overrides=[*TICK, "adversary.nodes=1", *extra]), run_dir=tmp_path)


@pytest.mark.parametrize("rule,beta", [("clip", 0.0), ("median", 0.25), ("trimmed", 0.0)])
def test_robust_gossip_merges_as_its_per_node_loop_twin(rule, beta):
    """method=robust_gossip's merge of the nodes that trained (here 0, 2, 3 of 6) against
    tests/reference/robust.py's rules, node by node, with each in-neighbour weighted 1/degree; the
    others keep their models. Byzantine senders (sign flip) forge what the loop forges."""
    e = engine_with("method=robust_gossip", f"algorithm.rule={rule}", f"algorithm.beta={beta}", "algorithm.b=1",
                    "adversary.nodes=[1,4]", "adversary.attack=sign_flip")
    x = e.state.theta.clone().numpy()
    a = e.wiring.a_full.toarray()
    due = np.array([0, 2, 3])
    e.algorithm.after_train(e, 1, due, None)
    want = x.copy()
    for i in due:
        sent = x.copy()
        sent[BYZ] = -x[BYZ]                                       # what i hears from its Byzantine neighbours
        sent[i] = x[i]
        w = np.zeros_like(a, dtype=float)
        w[i] = a[i] / a[i].sum()
        merged = {"clip": lambda: robust.clipped_gossip(sent, w, None),
                  "median": lambda: robust.median(sent, w),
                  "trimmed": lambda: robust.trimmed_mean(sent, w, 1)}[rule]()[i]
        want[i] = beta * x[i] + (1 - beta) * merged
    assert np.allclose(e.state.theta.numpy(), want, rtol=1e-10, atol=1e-12)

