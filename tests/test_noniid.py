"""The candidate readings of paper 1's "non-IID, Dirichlet alpha" (issue 28; data.py): each
sampler against a plain loop or its law, and the engine's use of them (its own shard only; each
node tested on its own label mix)."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import run_of
import torch

from test_config import make
from vecgossip.data.sampling import Shards, prior_mix_probs, sample_node_batches
from vecgossip.data.partition import dirichlet, largest_remainder


def test_prior_mix_is_dirichlet_of_alpha_times_the_uniform_prior():
    """Hsu et al.'s parametrisation: Dir(alpha q), q = 1/C: the same draws as label_mix at alpha/C
    (loop twin: numpy's Dirichlet row by row), and far more skewed at alpha = 0.5: a node's largest
    label share averages ~0.38 under Dir(0.5 1_10) but ~0.8 under Dir(0.05 1_10) (2000 nodes)."""
    got = prior_mix_probs(7, 0.5, np.random.default_rng(3))
    rng = np.random.default_rng(3)
    want = np.stack([rng.dirichlet(np.full(10, 0.05)) for _ in range(7)])
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-7)      # float32 of tiny shares
    assert prior_mix_probs(7, None, rng) is None
    from vecgossip.data.sampling import dirichlet_label_probs
    rng = np.random.default_rng(0)
    top_mix = float(dirichlet_label_probs(2000, 0.5, rng).max(1).values.mean())
    top_prior = float(prior_mix_probs(2000, 0.5, rng).max(1).values.mean())
    assert 0.33 < top_mix < 0.43 and top_prior > 0.7, (top_mix, top_prior)


def test_shards_sample_only_their_own_images_uniformly():
    labels = np.random.default_rng(0).integers(0, 10, 3000)
    part = dirichlet(labels, 5, 0.5, np.random.default_rng(1), min_samples=1)
    shards = Shards.of(part.members, part.offsets)
    assert np.array_equal(np.sort(part.members), np.arange(3000))                 # disjoint, all of them
    gen = torch.Generator().manual_seed(2)
    nodes = torch.tensor([4, 0, 2])
    draws = torch.cat([shards.sample(nodes, 64, gen) for _ in range(400)], 1)     # (3, 25600)
    for row, i in zip(draws, nodes.tolist()):
        own = part.client(i)
        assert np.isin(row.numpy(), own).all()                                    # its own shard only
        counts = np.bincount(np.searchsorted(own, row.numpy()), minlength=own.size)
        e = row.numel() / own.size                                                # uniform: chi-square
        chi2 = float(((counts - e) ** 2 / e).sum())
        assert chi2 < own.size + 6 * np.sqrt(2 * own.size), (i, chi2, own.size)   # 6 sd of chi2(df)


@pytest.fixture
def small_mnist(monkeypatch):
    from conftest import synthetic_dataset
    from vecgossip.composition import tick

    def load_data(cfg, device):
        return synthetic_dataset(600, 0), synthetic_dataset(400, 1)
    monkeypatch.setattr(tick, "load_data", load_data)
    return tick


def test_engine_with_shards_trains_on_its_own_shard(small_mnist):
    cfg = make(["+experiment=vc", "model=mlp", "nodes=6", "degree=3", "alpha=0.5", "data.sampler=shards"])
    engine = small_mnist.build_engine(run_of(cfg))
    nodes, images, _ = engine.draw(np.arange(6))
    for i in range(6):
        lo, c = int(engine.data.shards.start[i]), int(engine.data.shards.count[i])
        own = engine.data.shards.order[lo:lo + c]
        assert np.isin(images[i].numpy(), own.numpy()).all()
        mix = np.bincount(engine.train_data.labels[own].numpy(), minlength=10) / c      # its shard's label mix
        np.testing.assert_allclose(engine.data.label_probs[i].numpy(), mix, rtol=1e-6)
    assert torch.allclose(engine.data.label_probs.sum(1), torch.ones(6))
    same = small_mnist.build_engine(run_of(cfg))                                          # seeded: the same shards
    assert torch.equal(same.data.shards.order, engine.data.shards.order)


def test_local_evaluation_follows_each_nodes_label_mix(small_mnist):
    cfg = make(["+experiment=vc", "model=mlp", "nodes=6", "degree=3", "alpha=0.5", "data.eval_set=local",
                "data.local_eval_size=20"])
    engine = small_mnist.build_engine(run_of(cfg))
    idx = engine.data.evals.idx                                                         # (6, 20)
    assert idx.shape == (6, 20)
    labels = engine.data.evals.test.labels[idx]
    want = largest_remainder(engine.data.label_probs.double().numpy(), 20)             # exact counts per class
    got = np.stack([np.bincount(row.numpy(), minlength=10) for row in labels])
    assert np.array_equal(got, want)
    assert all(len(set(row.tolist())) == 20 for row in idx)                       # distinct images
    row, acc = engine.measure(0)
    from vecgossip.core.metrics import evaluate_per_node
    x, y = engine.data.evals.test.batch(idx)
    want_acc, _ = evaluate_per_node(engine.forward, engine.layout, engine.state.theta, x, y)
    np.testing.assert_allclose(acc, want_acc.numpy(), rtol=0, atol=1e-7)          # each on its own images


def test_today_s_reading_is_unchanged_by_the_options(small_mnist):
    """label_mix is the default and draws exactly what it drew before the options existed."""
    from vecgossip.data.sampling import dirichlet_label_probs
    cfg = make(["+experiment=vc", "model=mlp", "nodes=6", "degree=3", "alpha=0.5"])
    assert cfg.data.sampler == "label_mix" and cfg.data.eval_set == "fixed100"
    engine = small_mnist.build_engine(run_of(cfg))
    want = dirichlet_label_probs(6, 0.5, np.random.default_rng(0))
    assert torch.equal(engine.data.label_probs, want) and engine.data.shards is None and engine.data.evals.idx is None
    x, y = sample_node_batches(engine.train_data, want, 6, 4, torch.Generator().manual_seed(0))
    assert x.shape == (6, 4, 1, 28, 28)
