"""Privacy numbers that hold (issue 47): inputs that cannot give a meaningful bound are refused in one
line; sigma chosen from a target reaches it; dp-accounting's PLD accountant; Poisson sampling draws
the batches the accountant assumes; one example's epsilon when every node samples one shared pool;
each replica's privacy block in a replicas run's summary. References: Opacus and dp-accounting
called directly."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

import vecgossip
from test_config import REPO
from vecgossip.data.partition import ClientSampler, Partition
from vecgossip.privacy.accounting import composed_epsilon, epsilon, sigma_for

SMALL = ["method=dpsgd", "data=mnist", "model=mlp", "clients=4", "degree=2", "rounds=3", "eval_every=3",
         "data.local_test_size=10", "data.global_test_size=50", "progress=false"]


@pytest.mark.parametrize("over,message", [
    (["privacy.noise_multiplier=1", "privacy.delta=0.5"], "privacy.delta=0.5 is not below 1/"),
    (["privacy.noise_multiplier=0", "privacy.target_epsilon=3"],
     "privacy.target_epsilon=3.0 with privacy.noise_multiplier=0"),
    (["privacy.noise_multiplier=auto"], "privacy.noise_multiplier=auto needs privacy.target_epsilon"),
])
def test_meaningless_privacy_inputs_stop_in_one_line(data_root, tmp_path, over, message):
    proc = subprocess.run([sys.executable, "-m", "vecgossip", *SMALL, f"data_root={data_root}", *over,
                           f"hydra.run.dir={tmp_path / 'run'}"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-1500:]
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_poisson_sampling_is_the_round_engines():
    with pytest.raises(vecgossip.ConfigError, match="privacy.sampling=poisson is the round engine's"):
        vecgossip.compose("vc", overrides=["privacy.noise_multiplier=1", "privacy.sampling=poisson"])


def test_a_large_delta_is_accepted_when_asked_and_epsilon_is_never_negative(data_root, tmp_path):
    r = vecgossip.run(overrides=[*SMALL, f"data_root={data_root}", "privacy.noise_multiplier=1", "privacy.delta=0.5",
                                 "privacy.allow_large_delta=true"], run_dir=tmp_path)
    assert r.summary["privacy"]["epsilon"]["min"] >= 0 and (r.metrics["epsilon_max"] >= 0).all()
    assert epsilon(1.0, 0.01, 10, 0.9) >= 0 and composed_epsilon(50.0, ((0.001, 1),), 0.5) == 0.0


def test_sigma_from_a_target_reaches_it(data_root, tmp_path):
    """noise_multiplier=auto: the sigma spends target_epsilon over the planned steps (rounds x K of
    the most exposed client): the run ends within 1% below the target; the search agrees with
    Opacus's own accountant at the sigma it chose."""
    r = vecgossip.run(overrides=[*SMALL, f"data_root={data_root}", "privacy.noise_multiplier=auto",
                                 "privacy.target_epsilon=4"], run_dir=tmp_path)
    p = r.summary["privacy"]
    assert p["noise_multiplier_from"].startswith("auto") and p["noise_multiplier"] > 0
    assert 0.99 * 4 <= p["epsilon"]["max"] <= 4
    from opacus.accountants import RDPAccountant
    acc = RDPAccountant()
    acc.history = [(p["noise_multiplier"], p["sampling_rate"]["max"], p["steps"]["max"])]
    assert acc.get_epsilon(1e-5) == pytest.approx(p["epsilon"]["max"], rel=1e-9)
    s = sigma_for(1.0, 0.01, 1000, 1e-5)
    assert 0.99 <= epsilon(s, 0.01, 1000, 1e-5) <= 1.0


def test_the_pld_accountant_is_dp_accountings():
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant
    acc = pld_privacy_accountant.PLDAccountant()
    acc.compose(dp_accounting.PoissonSampledDpEvent(0.02, dp_accounting.GaussianDpEvent(1.1)), 300)
    assert epsilon(1.1, 0.02, 300, 1e-5, "pld") == pytest.approx(acc.get_epsilon(1e-5), rel=1e-12)
    assert epsilon(1.1, 0.02, 300, 1e-5, "pld") < epsilon(1.1, 0.02, 300, 1e-5, "rdp")   # PLD is tighter


def test_poisson_batches_match_the_accountants_rate():
    """privacy.sampling=poisson: over many steps every sample of a client's shard is in a batch
    with frequency B / n (5-sd bounds of the binomial), batch sizes vary as Binomial(n, B / n),
    padding carries weight 0, two samples are in together with frequency (B / n)^2."""
    n, b, steps = 40, 8, 4000
    part = Partition(np.arange(2 * n), np.array([0, n, 2 * n]))
    smp = ClientSampler(part, b, torch.Generator().manual_seed(0), poisson=True)
    clients = torch.tensor([0, 1])
    seen = np.zeros((steps, 2 * n), dtype=bool)
    sizes = []
    for t in range(steps):
        mb = smp.next(clients)
        for c in range(2):
            real = mb.idx[c][mb.weight[c] > 0].numpy()
            assert len(set(real.tolist())) == real.size and ((real >= c * n) & (real < (c + 1) * n)).all()
            seen[t, real] = True
            sizes.append(real.size)
    q = b / n
    sd = np.sqrt(steps * q * (1 - q))
    assert (np.abs(seen.sum(0) - steps * q) <= 5 * sd).all()
    sizes = np.array(sizes)
    assert abs(sizes.mean() - b) < 5 * np.sqrt(n * q * (1 - q) / sizes.size) and abs(sizes.var() / (n * q * (1 - q)) - 1) < 0.1
    both = (seen[:, 0] & seen[:, 1]).sum()
    assert abs(both - steps * q * q) <= 5 * np.sqrt(steps * q * q * (1 - q * q))


def test_one_examples_epsilon_composes_every_node_that_can_draw_it(data_root, tmp_path):
    """The tick engine's shared pool (IID): one image can be in any node's batch, so its epsilon
    composes every node's steps at the per-image rate; with disjoint shards it is its node's own.
    Reference: Opacus's RDP accountant over the nodes' (rate, steps), computed here."""
    base = ["method=vc", "model=mlp", "nodes=6", "degree=2", "max_ticks=30", "eval_every=30", "progress=false",
            f"data_root={data_root}", "privacy.noise_multiplier=1.2"]
    r = vecgossip.run(overrides=base, run_dir=tmp_path / "pool")
    p = r.summary["privacy"]
    from opacus.accountants import RDPAccountant
    q = 1 - (1 - 0.1 / 5421) ** 64          # the rarest label of MNIST's training set ("5": 5421 images) has the largest rate
    acc = RDPAccountant()
    steps = r.summary["privacy"]["steps"]["max"]
    acc.history = [(1.2, q, 6 * steps)]     # 6 nodes, every node the same steps (fixed T_acq, all train at tick 0)
    assert p["epsilon_per_example"]["max"] == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)
    assert p["epsilon_per_example"]["max"] > p["epsilon"]["max"] and "shared pool" in p["epsilon_per_example"]["relation"]
    s = vecgossip.run(overrides=[*base, "data.sampler=shards"], run_dir=tmp_path / "shards")
    assert s.summary["privacy"]["epsilon_per_example"]["max"] == pytest.approx(s.summary["privacy"]["epsilon"]["max"])


def test_replicas_summary_carries_each_replicas_privacy(data_root, tmp_path):
    r = vecgossip.run(overrides=[*SMALL, f"data_root={data_root}", "privacy.noise_multiplier=1", "replicas=2"],
                      run_dir=tmp_path)
    blocks = r.summary["privacy"]
    assert len(blocks) == 2 and all(b["noise_multiplier"] == 1.0 and b["epsilon"]["max"] > 0 for b in blocks)


@pytest.mark.parametrize("extra,why", [
    (["engine.participation=0.5"], "not every client noises every round"),
    (["faults.drop=0.1"], "faults drop messages"),
    (["topology=random"], "the graph is redrawn every round"),
    (["method=dfedavg", "engine.local_steps=2", "engine.local_epochs=null"], "more than one private local step a round"),
])
def test_the_network_bound_is_withheld_where_its_assumptions_fail(data_root, tmp_path, extra, why):
    over = [o for o in SMALL if not (o.startswith("degree") and "topology=random" not in extra)]
    r = vecgossip.run(overrides=[*over, "topology=ring", f"data_root={data_root}", "privacy.noise_multiplier=1", *extra],
                      run_dir=tmp_path)
    net = r.summary["privacy"]["network"]
    assert net["reported"] is False and why in net["why"]
