"""Message passing (issue 37): the realized communication as data (neighbourhoods, edge list), the
gather service of both engines (= mix for a weighted sum; one fault realization shared with mix;
chunks bounded in bytes), the robust rules against their per-node loop twins
(tests/reference/robust.py) and an independent library (byzfl), the attacks against their
definitions on hand-made vectors, and the honest metrics."""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import vecgossip
from reference import robust
from test_services import ROUNDS, ring_w, round_engine, tick_engine
from vecgossip.adversaries.adversary import Adversary, byzantine_nodes
from vecgossip.adversaries import Attack
from vecgossip.adversaries.attacks import ALIE, IPM, Dissensus, Gaussian, SignFlip
from vecgossip.adversaries.config import AdversaryConfig
from vecgossip.algorithms import Block
from vecgossip.engines.gather import gather
from vecgossip.network.neighbourhoods import in_degree, neighbourhoods, slots
from vecgossip.runtime.shard import Shard

REPO = Path(__file__).resolve().parents[1]

F64 = torch.float64
# receiver-by-sender, directed: 0 hears 1; 1 hears 0 and 3; 2 hears nobody; 3 hears 0, 1, 2
W4 = np.array([[0.5, 0.5, 0, 0],
               [0.2, 0.3, 0, 0.5],
               [0, 0, 1, 0],
               [0.25, 0.25, 0.25, 0.25]])


def test_neighbourhoods_and_edge_list_by_hand():
    nb = neighbourhoods(sp.csr_matrix(W4), dtype=F64)
    assert nb.d_max == 3
    assert nb.index.tolist() == [[1, 0, 0], [0, 3, 1], [2, 2, 2], [0, 1, 2]]     # padding: the receiver
    assert nb.mask.tolist() == [[True, False, False], [True, True, False], [False] * 3, [True] * 3]
    assert nb.weight.tolist() == [[0.5, 0, 0], [0.2, 0.5, 0], [0, 0, 0], [0.25, 0.25, 0.25]]
    assert nb.self_weight.tolist() == [0.5, 0.3, 1.0, 0.25] and nb.degree.tolist() == [1, 2, 0, 3]
    senders, receivers, weights = nb.edges()
    assert senders.tolist() == [1, 0, 3, 0, 1, 2] and receivers.tolist() == [0, 1, 1, 3, 3, 3]
    assert weights.tolist() == [0.5, 0.2, 0.5, 0.25, 0.25, 0.25]
    assert in_degree(sp.csr_matrix(W4)).tolist() == [1, 2, 0, 3]
    part = neighbourhoods(sp.csr_matrix(W4), 1, 3, dtype=F64, width=3)          # a rank's rows 1, 2
    assert part.receivers.tolist() == [1, 2] and part.d_max == 3 and part.index.tolist() == [[0, 3, 1], [2, 2, 2]]


def test_slots_place_a_realized_message_on_its_link():
    links = neighbourhoods(sp.csr_matrix(W4))
    lost = W4.copy()
    lost[1, 0], lost[1, 1] = 0.0, 0.5                 # 0 -> 1 lost: 1 hears only 3, its second link
    got = slots(neighbourhoods(sp.csr_matrix(lost)), links)
    assert got[1, 0].item() == 1 and got[3].tolist() == [0, 1, 2] and got[0, 0].item() == 0


@pytest.mark.parametrize("budget", [64 << 20, 1])
def test_round_gather_weighted_sum_is_mix_with_the_same_lost_messages(budget):
    e = round_engine(["faults.drop=0.5"])
    e.online = np.ones(6, dtype=bool)
    x = torch.randn(6, 3, 4, dtype=F64)
    want = e.mix(x, 0)
    sent = e.faults.sent
    nb, w = e.graph().neighbourhoods(0)
    blocks = []

    def reduce(block):
        blocks.append(block.msgs.shape[0])
        return block.weighted_sum()
    got = gather(x, nb, w, Shard(6), reduce, budget=budget)
    assert torch.allclose(got, want, atol=1e-14)
    assert e.faults.sent == sent == 12 and e.faults.lost > 0         # one realization, counted once
    assert blocks == ([6] if budget > 1 else [1] * 6)                  # a block holds at most its budget
    assert torch.allclose(e.gather(x, 0, Block.weighted_sum), want, atol=1e-14)
    assert e.neighbourhoods(0).degree.sum().item() == 12 - e.faults.lost


def test_tick_gather_weighted_sum_is_mix_with_the_same_lost_messages():
    e = tick_engine(["faults.drop=0.5"])
    e.schedule.due(0)
    w = sp.csr_matrix((np.eye(6) + e.a_full.toarray()) / 3)          # degree 2: 1/3 on self and each link
    x = torch.randn(6, 5, dtype=F64)
    want = e.mix(x, w)
    sent = e.faults.sent
    assert torch.allclose(e.gather(x, w, Block.weighted_sum), want, atol=1e-14) and e.faults.sent == sent
    nb = e.neighbourhoods(w)
    assert nb.degree.sum().item() == 12 - e.faults.lost
    captured = []
    e.gather(x, w, lambda b: captured.append(b) or b.own)
    links = e.a_full.toarray()
    for r, row in enumerate(captured[0].slots.tolist()):              # slots: the link's rank among i's links
        order = list(np.flatnonzero(links[r]))
        assert [order.index(s) for s, m in zip(captured[0].senders[r].tolist(), captured[0].mask[r].tolist())
                if m] == [k for k, m in zip(row, captured[0].mask[r].tolist()) if m]


def realized(e) -> np.ndarray:
    return e.graph().realized(1, 0)[1].toarray()


RULES = [("clipped_gossip", ["algorithm.tau=0.8"], lambda x, w, e: robust.clipped_gossip(x, w, 0.8)),
         ("clipped_gossip", [], lambda x, w, e: robust.clipped_gossip(x, w, None)),
         ("trimmed_mean", ["algorithm.b=1"], lambda x, w, e: robust.trimmed_mean(x, w, 1)),
         ("median", [], lambda x, w, e: robust.median(x, w)),
         ("balance", ["algorithm.gamma=1.2"], lambda x, w, e: robust.balance(x, w, 1, e.cfg.rounds, 1.2, 1.0, 0.5))]


@pytest.mark.parametrize("method,extra,twin", RULES, ids=[f"{m}{'-' + e[0] if e else ''}" for m, e, _ in RULES])
def test_robust_rule_equals_its_per_node_loop_under_faults(method, extra, twin):
    """One aggregation over the step's realized W (faults.drop=0.3: lost messages are not there)
    against the rule written receiver by receiver (tests/reference/robust.py)."""
    e = round_engine([f"method={method}", "topology=exponential", "clients=8", "faults.drop=0.3", *extra])
    e.online = np.ones(8, dtype=bool)
    gen = torch.Generator().manual_seed(0)
    e.state.theta.copy_(torch.randn(e.state.theta.shape, generator=gen, dtype=F64) * 0.3 + 1.0)
    x = e.state.theta.clone().numpy()
    e.algorithm.communicate(e, 1, torch.arange(8))
    w = realized(e)
    assert e.faults.lost > 0 and e.faults.sent > e.faults.lost                 # some messages were lost
    assert np.allclose(e.state.theta.numpy(), twin(x, w, e), rtol=1e-12, atol=1e-12)


def test_clipped_gossip_with_infinite_tau_is_dpsgd(tmp_path):
    common = [*ROUNDS, "rounds=3", "topology=exponential", "clients=8"]
    a = vecgossip.run(vecgossip.compose(overrides=[*common, "method=clipped_gossip", "algorithm.tau=inf"]),
                      run_dir=tmp_path / "clip")
    b = vecgossip.run(vecgossip.compose(overrides=[*common, "method=dpsgd"]), run_dir=tmp_path / "dpsgd")
    cols = [c for c in b.metrics.columns if c in a.metrics.columns]
    assert len(cols) > 8
    assert np.allclose(a.metrics[cols].to_numpy(float), b.metrics[cols].to_numpy(float), rtol=0, atol=1e-12,
                       equal_nan=True)


def test_neighbourhood_rules_agree_with_byzfl():
    """The neighbourhood's trimmed mean and median against byzfl's aggregators applied to one
    receiver's vectors (an independent implementation)."""
    byzfl = pytest.importorskip("byzfl")
    from vecgossip.algorithms.median import median
    from vecgossip.algorithms.trimmed_mean import trimmed_mean
    gen = torch.Generator().manual_seed(1)
    own, msgs = torch.randn(3, 7, generator=gen, dtype=F64), torch.randn(3, 5, 7, generator=gen, dtype=F64)
    mask = torch.tensor([[True] * 5, [True, True, True, True, False], [True, False, True, True, True]])
    got_t, got_m = trimmed_mean(own, msgs, mask, 1), median(own, msgs, mask)
    for i in range(3):
        vecs = msgs[i][mask[i]].numpy()
        kept = len(vecs) - 2
        want_t = (own[i].numpy() + kept * byzfl.TrMean(f=1)(vecs)) / (kept + 1)
        assert np.allclose(got_t[i].numpy(), want_t, atol=1e-13)
        assert np.allclose(got_m[i].numpy(), byzfl.Median()(np.vstack([own[i].numpy(), vecs])), atol=1e-13)


def hand_block() -> tuple[Block, torch.Tensor, torch.Tensor]:
    """Two receivers with four messages each; sender 9 is Byzantine, in both neighbourhoods."""
    own = torch.tensor([[1.0, 2.0], [0.0, -1.0]], dtype=F64)
    msgs = torch.tensor([[[2.0, 2.0], [9.0, 9.0], [0.0, 4.0], [1.0, 0.0]],
                         [[1.0, 1.0], [9.0, 9.0], [-1.0, -1.0], [5.0, 5.0]]], dtype=F64)
    senders = torch.tensor([[3, 9, 4, 5], [3, 9, 6, 1]])
    mask = torch.tensor([[True, True, True, True], [True, True, True, False]])   # receiver 1: 4th is padding
    weight = torch.tensor([[0.2, 0.1, 0.2, 0.2], [0.25, 0.25, 0.25, 0.0]], dtype=F64)
    block = Block(np.array([0, 1]), torch.tensor([0, 1]), own, msgs, senders, mask, weight,
                  torch.tensor([0.3, 0.25], dtype=F64))
    byz = (senders == 9) & mask
    return block, byz, ~byz & mask


def test_attacks_forge_what_their_definitions_say():
    block, byz, honest = hand_block()
    params = AdversaryConfig(nodes=[9], epsilon=1.5, sigma=2.0)
    flipped = SignFlip(params, 10, 1).forge(block, byz, honest, torch.Generator())
    assert flipped[0, 1].tolist() == [-9.0, -9.0] and torch.equal(flipped[~byz], block.msgs[~byz])
    # IPM: -eps mean(own, honest); receiver 0: mean of (1,2),(2,2),(0,4),(1,0) = (1, 2)
    ipm = IPM(params, 10, 1).forge(block, byz, honest, torch.Generator())
    assert torch.allclose(ipm[0, 1], torch.tensor([-1.5, -3.0], dtype=F64))
    # receiver 1: own (0,-1), honest (1,1), (-1,-1): mean (0, -1/3); the padding is not a model
    assert torch.allclose(ipm[1, 1], -1.5 * torch.tensor([0.0, -1 / 3], dtype=F64))
    # ALIE with z = 1: mean - std (unbiased) per coordinate; receiver 0: std of (1,2,0,1) and (2,2,4,0)
    alie = ALIE(params.model_copy(update={"z": 1.0}), 10, 1).forge(block, byz, honest, torch.Generator())
    want = torch.tensor([1 - math.sqrt(2 / 3), 2 - math.sqrt(8 / 3)], dtype=F64)
    assert torch.allclose(alie[0, 1], want)
    # dissensus: x_i - eps sum_honest w_ij (x_j - x_i) / w_ib; receiver 0:
    # 0.2 (1, 0) + 0.2 (-1, 2) + 0.2 (0, -2) = (0, 0) -> x_0 itself; receiver 1:
    # 0.25 (1, 2) + 0.25 (-1, 0) = (0, 0.5) -> (0, -1) - 1.5 (0, 0.5) / 0.25 = (0, -4)
    dis = Dissensus(params, 10, 1).forge(block, byz, honest, torch.Generator())
    assert torch.allclose(dis[0, 1], block.own[0]) and torch.allclose(dis[1, 1], torch.tensor([0.0, -4.0], dtype=F64))
    for forged in (ipm, alie, dis):
        assert torch.equal(forged[~byz], block.msgs[~byz])                # honest messages untouched
    big = Block(block.receivers, block.rows, block.own, torch.zeros(2, 4, 20000, dtype=F64), block.senders,
                block.mask, block.weight, block.self_weight)
    noise = Gaussian(params, 10, 1).forge(big, byz, honest, torch.Generator().manual_seed(0))
    assert abs(noise[byz].std().item() - 2.0) < 0.05 and bool((noise[~byz] == 0).all())


def test_alie_z_max_and_byzfl_agree_with_the_attacks():
    byzfl = pytest.importorskip("byzfl")
    assert robust.alie_z(16, 2) == 0.0                      # s = 9 - 2 = 7; Phi^-1((14 - 7) / 14) = 0
    assert ALIE(AdversaryConfig(), 10, 1).z() == pytest.approx(-0.13971, abs=1e-5)   # Phi^-1(4 / 9)
    block, byz, honest = hand_block()
    params = AdversaryConfig(nodes=[9], epsilon=0.7, z=1.3)
    alie = ALIE(params, 10, 1).forge(block, byz, honest, torch.Generator())
    ipm = IPM(params, 10, 1).forge(block, byz, honest, torch.Generator())
    for i in range(2):
        vectors = np.vstack([block.own[i].numpy(), block.msgs[i][honest[i]].numpy()])
        assert np.allclose(alie[i, 1].numpy(), byzfl.ALittleIsEnough(tau=-1.3)(vectors))
        assert np.allclose(ipm[i, 1].numpy(), byzfl.InnerProductManipulation(tau=0.7)(vectors))


@pytest.mark.parametrize("attack,extra", [("alie", ["adversary.z=1.0"]), ("ipm", ["adversary.epsilon=1.5"]),
                                          ("dissensus", ["adversary.epsilon=1.5"])])
def test_omniscient_attacks_in_a_run_equal_the_per_receiver_definition(attack, extra):
    """Through the engine's gather: what each receiver gets from its Byzantine neighbours equals the
    definition evaluated receiver by receiver on that step's realized W."""
    e = round_engine(["method=dpsgd", "topology=exponential", "clients=8", "adversary.nodes=[2,5]",
                      f"adversary.attack={attack}", "faults.drop=0.2", *extra])
    e.online = np.ones(8, dtype=bool)
    x = torch.randn(8, 6, generator=torch.Generator().manual_seed(3), dtype=F64)
    blocks = []
    e.gather(x, 1, lambda b: blocks.append(b) or b.own)
    w = realized(e)
    b = blocks[0]
    checked = 0
    for r in range(8):
        for k in range(b.msgs.shape[1]):
            j = int(b.senders[r, k])
            if not b.mask[r, k] or j not in (2, 5) or r in (2, 5):
                continue
            want = robust.omniscient_message(attack, x.numpy(), w, r, {2, 5}, 8, 2, 1.5, 1.0)
            assert np.allclose(b.msgs[r, k].numpy(), want, atol=1e-12)
            checked += 1
    assert checked >= 4


def test_byzantine_nodes_are_seeded_and_left_out_of_the_honest_metrics(tmp_path):
    assert byzantine_nodes(2, 16, 0).sum() == 2 and (byzantine_nodes(2, 16, 0) == byzantine_nodes(2, 16, 0)).all()
    assert byzantine_nodes(0.25, 16, 1).sum() == 4 and byzantine_nodes([3, 7], 16, 0).nonzero()[0].tolist() == [3, 7]
    res = vecgossip.run(vecgossip.compose(overrides=[*ROUNDS, "method=dpsgd", "adversary.nodes=[0,3]",
                                                     "adversary.attack=sign_flip", "rounds=2"]),
                        run_dir=tmp_path / "r")
    acc = np.load(tmp_path / "r" / "accuracy.npy")
    assert np.isnan(acc[:, [0, 3]]).all() and not np.isnan(acc[:, [1, 2, 4, 5]]).any()
    last = res.metrics.iloc[-1]
    assert last["byzantine_clients"] == 2
    assert last["acc_mean"] == pytest.approx(np.mean(acc[-1, [1, 2, 4, 5]]))
    assert last["acc_min"] == pytest.approx(np.min(acc[-1, [1, 2, 4, 5]]))


def test_adversary_state_round_trips_and_label_flip_poisons_only_byzantine_clients():
    adv = Adversary(AdversaryConfig(nodes=2, attack="gaussian"), 8, 0)
    saved = adv.state()
    a = torch.randn(3, generator=adv.generator)
    adv.load(saved)
    assert torch.equal(a, torch.randn(3, generator=adv.generator))
    e = round_engine(["method=dpsgd", "adversary.nodes=[1]", "adversary.attack=label_flip"])
    assert e.poisoned.tolist() == [False, True, False, False, False, False]


def test_fedper_mixes_the_base_layers_and_keeps_each_clients_classifier():
    """FedPer's gossip step against its definition written column by column: the base layers are
    W x (the step's realized W, some messages lost), the personal layer (the MLP's last, by default;
    or the one named) is each client's own, unchanged; the bytes counted are the base layers'."""
    for extra, personal in (([], None), (["algorithm.local=[fc1]"], "fc1")):
        e = round_engine(["method=fedper", "topology=exponential", "clients=8", "faults.drop=0.3", *extra])
        e.online = np.ones(8, dtype=bool)
        gen = torch.Generator().manual_seed(1)
        e.state.theta.copy_(torch.randn(e.state.theta.shape, generator=gen, dtype=F64))
        x = e.state.theta.clone().numpy()
        sent = e.algorithm.communicate(e, 1, torch.arange(8))
        w = realized(e)
        names = [t.layer for t in e.layout.tensors()]
        own = names[-1] if personal is None else personal
        want = x.copy()
        for t in e.layout.tensors():                       # tensor by tensor, client by client
            for i in range(8):
                if t.layer != own:
                    want[i, t.start:t.stop] = sum(w[i, j] * x[j, t.start:t.stop] for j in range(8))
        assert e.faults.lost > 0
        assert np.allclose(e.state.theta.numpy(), want, rtol=1e-12, atol=1e-12)
        kept = sum(t.stop - t.start for t in e.layout.tensors() if t.layer == own)
        assert 0 < kept < x.shape[1]
        assert math.isclose(float(sent), float(e.messages(1)) * e.model_bytes * (x.shape[1] - kept) / x.shape[1])


def test_fedper_names_a_missing_layer_in_one_line(tmp_path):
    with pytest.raises(vecgossip.ConfigError, match=r"algorithm.local=\['head'\]: no layer of the model is named head"):
        vecgossip.run(vecgossip.compose(overrides=[*ROUNDS, "method=fedper", "algorithm.local=[head]"]),
                      run_dir=tmp_path)


class ZeroAttack(Attack):
    """A user's own attack (by dotted path): every Byzantine message is zeros."""

    def forge(self, block, byzantine, honest, generator):
        return block.msgs.masked_fill(byzantine.view(*byzantine.shape, *[1] * (block.msgs.dim() - 2)), 0.0)


class NoForge(Attack):
    """An attack that forgot its forge."""


def test_a_users_own_attack_by_dotted_path_replaces_what_byzantine_nodes_send(tmp_path):
    """adversary.attack=<module.Class>: D-PSGD's step then equals W x with the Byzantine rows of x
    zeroed, for every honest receiver (written out with numpy on the realized W); a Byzantine
    receiver is not measured. A dotted path that is not an Attack stops with one line."""
    e = round_engine(["method=dpsgd", "topology=exponential", "clients=8", "faults.drop=0.2",
                      "adversary.nodes=[2,5]", "adversary.attack=test_message_passing.ZeroAttack"])
    e.online = np.ones(8, dtype=bool)
    e.state.theta.copy_(torch.randn(e.state.theta.shape, generator=torch.Generator().manual_seed(4), dtype=F64))
    x = e.state.theta.clone().numpy()
    e.algorithm.communicate(e, 1, torch.arange(8))
    w = realized(e)
    sent = x.copy()
    sent[[2, 5]] = 0.0
    honest = [0, 1, 3, 4, 6, 7]
    assert w[honest][:, [2, 5]].sum() > 0                                   # some honest node hears them
    assert np.allclose(e.state.theta.numpy()[honest], (w @ sent)[honest], rtol=1e-12, atol=1e-12)
    with pytest.raises(vecgossip.ConfigError, match=r"adversary.attack=math.sqrt is not a .*Attack subclass"):
        vecgossip.run(vecgossip.compose(overrides=[*ROUNDS, "adversary.nodes=1", "adversary.attack=math.sqrt"]),
                      run_dir=tmp_path)
    with pytest.raises(vecgossip.ConfigError, match=r"adversary.attack=test_message_passing.NoForge: NoForge does "
                                                    r"not define forge"):
        vecgossip.run(vecgossip.compose(overrides=[*ROUNDS, "adversary.nodes=1",
                                                   "adversary.attack=test_message_passing.NoForge"]), run_dir=tmp_path)


def test_memory_estimate_counts_the_gather_and_per_edge_state():
    """A rule that gathers, or Byzantine nodes, add the gather's workspace: the result (N x P) and
    the rule's ``gather_blocks`` blocks of N (d_max + 1) P bytes (all 6 receivers fit in one block
    here), + 1 block for the adversary's forged copy; per-edge state adds d_max copies per receiver."""
    from conftest import run_of
    from vecgossip.runtime import memory
    import cases
    cases.register()                                                       # the synthetic data set "golden"
    est = lambda *extra: memory.estimate(run_of(vecgossip.compose(overrides=[*ROUNDS, "topology=ring", *extra])))[0]  # noqa: E731
    plain = est("method=dpsgd")
    p = run_of(vecgossip.compose(overrides=[*ROUNDS, "method=dpsgd"])).cfg.layout.size
    n, d, width = 6, 2, 8                                                  # 6 clients on a ring, float64
    block = n * (d + 1) * p * width
    assert est("method=clipped_gossip") - plain == n * p * width + 3 * block     # messages, differences, weighted
    assert est("method=median") - plain == n * p * width + 5 * block             # + padded copy, sort values, indices
    assert est("method=median", "adversary.nodes=1") - plain == n * p * width + 6 * block
    assert est("method=dpsgd", "adversary.nodes=1") - plain == n * p * width + 2 * block
    assert "MiB for the gather" in memory.estimate(run_of(vecgossip.compose(
        overrides=[*ROUNDS, "topology=ring", "method=median"])))[1]
    assert memory.declared_copies(TrustState(), run_of(vecgossip.compose(overrides=ROUNDS)).cfg.layout, d) == \
        pytest.approx(3 * d / p)                                           # (d_max, 3) floats per receiver
    # blocks of at most 64 MiB: whole receivers' (d_max + 1, P) rows, as engines.gather.chunk_rows cuts them
    assert memory.gather_workspace(16, 15, 431_080, 4, 5) == 16 * 431_080 * 4 + 5 * 2 * 16 * 431_080 * 4


@pytest.mark.parametrize("rule", ["median", "trimmed", "clipped", "balance"])
def test_gather_workspace_covers_each_rules_measured_peak(rule):
    """What memory.estimate counts for a gathering rule against the peak its gather really reaches
    (benchmarks/gather.py --memory-of: a fresh process, glibc's malloc, VmHWM above the resident set
    before the call; 16 LeNets on the complete graph, blocks of 2 receivers x 16 messages): within
    20% above the count (the issue's band), never under 2/3 of it. Measured on AMD EPYC over 4-5
    runs each, MiB: median 295-322, trimmed 285-298, clipped 187-200, balance 140-166, against
    289 / 289 / 184 / 184 counted (the same call's peak varies by up to 10% between runs)."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gather.py"), "--memory-of", f"gather_{rule}",
                          "--topologies", "complete", "--m", "16", "--model", "lenet", "--data", "mnist",
                          "--malloc", "default", "--budget-mib", "64"], capture_output=True, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=REPO / "benchmarks", timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    measured = float(out.stdout.strip().splitlines()[-1]) * 2**20
    from vecgossip.algorithms.balance import Balance
    from vecgossip.algorithms.clipped_gossip import ClippedGossip
    from vecgossip.algorithms.median import Median
    from vecgossip.algorithms.trimmed_mean import TrimmedMean
    from vecgossip.runtime import memory
    cls = {"median": Median, "trimmed": TrimmedMean, "clipped": ClippedGossip, "balance": Balance}[rule]
    counted = memory.gather_workspace(16, 15, 431_080, 4, cls.requires.gather_blocks)
    assert counted * 2 / 3 <= measured <= counted * 1.2, (measured / 2**20, counted / 2**20)


class TrustState:
    def state(self, layout):
        from vecgossip.algorithms import PerEdge
        return {"s": PerEdge((3,))}


def test_byzantine_report_by_hand(tmp_path):
    """byzantine.md from hand-made runs: mean ± sd over seeds in %, the worst honest client's in
    brackets, a diverged seed left out of the mean and counted, an algorithm option in the rule's
    name, attack "none" = no Byzantine client, the plot written."""
    import pandas as pd
    from vecgossip.report import byzantine as rb
    row = dict(topology="ring", clients=16, diverged_round=np.nan)
    runs = pd.DataFrame([
        {**row, "method": "dpsgd", "attack": "sign_flip", "byzantine": 2, "acc_mean": 0.5, "acc_min": 0.1,
         "options": "adversary.attack=sign_flip, seed=0"},
        {**row, "method": "dpsgd", "attack": "sign_flip", "byzantine": 2, "acc_mean": 0.7, "acc_min": 0.3,
         "options": "adversary.attack=sign_flip, seed=1"},
        {**row, "method": "dpsgd", "attack": "sign_flip", "byzantine": 2, "acc_mean": np.nan, "acc_min": np.nan,
         "options": "adversary.attack=sign_flip, seed=2", "diverged_round": 40},
        {**row, "method": "dpsgd", "attack": "sign_flip", "byzantine": 0, "acc_mean": 0.9, "acc_min": 0.8,
         "options": "adversary.nodes=0, seed=0"},
        {**row, "method": "clipped_gossip", "attack": "sign_flip", "byzantine": 2, "acc_mean": 0.8, "acc_min": 0.6,
         "options": "algorithm.tau=0.1, adversary.attack=sign_flip, seed=0"},
    ])
    runs.loc[runs.byzantine == 0, "attack"] = "none"          # as report/rounds.py reads a run without Byzantine nodes
    md = rb.report(tmp_path, runs)
    assert "## ring, 16 clients, 2 Byzantine" in md
    assert "| dpsgd | 90.0 [80.0] (n=1) | 60.0 ± 14.1 [20.0] (1 diverged) |" in md
    assert "| clipped_gossip (tau=0.1) |  | 80.0 [60.0] (n=1) |" in md
    assert (tmp_path / "byzantine.png").stat().st_size > 10_000 and (tmp_path / "byzantine.csv").exists()
