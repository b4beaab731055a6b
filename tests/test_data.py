"""Samplers: Dirichlet label frequencies converge to each node's drawn distribution; IID is uniform;
each sampled image has the sampled label. MNIST loading and the fixed-100 evaluation set."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import synthetic_dataset
from vecgossip.data.sampling import dirichlet_label_probs, sample_indices, sample_labels, sample_node_batches
from vecgossip.data.dataset import eval_indices
from vecgossip.data.registry import load_mnist


def test_dirichlet_frequencies_converge_to_node_distribution():
    probs = dirichlet_label_probs(6, 0.5, np.random.default_rng(0))
    assert probs.shape == (6, 10)
    torch.testing.assert_close(probs.sum(1), torch.ones(6))
    g = torch.Generator().manual_seed(0)
    labels = torch.cat([sample_labels(probs, 6, 64, g, "cpu") for _ in range(500)], 1)   # (6, 32000)
    freq = torch.stack([torch.bincount(r, minlength=10) for r in labels]).float() / labels.shape[1]
    # binomial std <= 0.5/sqrt(32000) = 0.0028: 5 sigma
    assert (freq - probs).abs().max() < 0.014


def test_dirichlet_concentration_matters():
    rng = np.random.default_rng(1)
    skewed = dirichlet_label_probs(2000, 0.1, rng).max(1).values.mean()
    flat = dirichlet_label_probs(2000, 100.0, rng).max(1).values.mean()
    assert skewed > 0.6 and flat < 0.2


def test_iid_is_uniform_over_labels():
    g = torch.Generator().manual_seed(0)
    labels = sample_labels(None, 50, 64, g, "cpu")
    freq = torch.bincount(labels.flatten(), minlength=10).float() / labels.numel()
    assert (freq - 0.1).abs().max() < 0.01  # std 0.0017


def test_sampled_images_have_sampled_labels_and_cover_each_label():
    data = synthetic_dataset(200)
    g = torch.Generator().manual_seed(0)
    labels = sample_labels(None, 4, 5000, g, "cpu")
    idx = sample_indices(data.index, labels, g)
    assert torch.equal(data.labels[idx], labels)
    # within label 3 all 20 images are drawn, roughly uniformly
    counts = torch.bincount(idx[labels == 3], minlength=200)[3::10]
    assert (counts > 0).all() and counts.float().std() / counts.float().mean() < 0.3
    x, y = sample_node_batches(data, None, 4, 64, g)
    assert x.shape == (4, 64, 1, 28, 28) and y.shape == (4, 64)
    assert x.dtype == torch.float32 and 0 <= x.min() and x.max() < 1.0   # scaled by 1/256


def test_bad_alpha():
    with pytest.raises(ValueError, match="data.alpha"):
        dirichlet_label_probs(3, 0.0, np.random.default_rng(0))


def test_missing_dataset_says_where_to_put_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="MNIST/raw") as err:
        load_mnist(tmp_path, train=True)
    assert "VECGOSSIP_DATA" in str(err.value) and "data.root" in str(err.value)


def test_real_mnist_and_fixed100(data_root):
    test = load_mnist(data_root, train=False)
    train = load_mnist(data_root, train=True)
    assert train.images.shape == (60000, 1, 28, 28) and test.images.shape == (10000, 1, 28, 28)
    idx = eval_indices(test.labels, "fixed100")
    assert idx.numel() == 100
    assert torch.equal(test.labels[idx], torch.arange(10).repeat_interleave(10))
    # the first 10 of each label, in test-set order
    for c in range(10):
        want = torch.nonzero(test.labels == c).flatten()[:10]
        assert torch.equal(idx[c * 10:(c + 1) * 10], want)
    assert eval_indices(test.labels, "full").numel() == 10000
    with pytest.raises(ValueError, match="data.eval_set"):
        eval_indices(test.labels, "fixed1000")
