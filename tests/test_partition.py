"""Fixed client partitions, local test sets, the per-client batch sampler and batched augmentation,
checked against their definitions (partition.py, augment.py) with plain loops and statistics."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from vecgossip.data.augment import crop_flip, draw_crops
from vecgossip.data.dataset import Dataset, LabelIndex
from vecgossip.data.partition import (ClientSampler, dirichlet, iid, largest_remainder, local_test_sets, make,
                                      pathological)


def labels_of(n=2000, classes=10, seed=0):
    return np.random.default_rng(seed).integers(0, classes, n)


def check_disjoint_cover(part, n, full=True):
    seen = np.concatenate([part.client(i) for i in range(part.m)])
    assert np.unique(seen).size == seen.size                        # disjoint
    if full:
        assert np.array_equal(np.sort(seen), np.arange(n))          # every sample assigned


def test_iid_is_an_even_random_split():
    part = iid(1003, 10, np.random.default_rng(0))
    check_disjoint_cover(part, 1003)
    assert set(part.sizes) == {100, 101}
    assert not np.array_equal(part.client(0), np.arange(100))     # shuffled


def test_dirichlet_splits_each_class_by_its_own_proportions():
    labels = labels_of()
    skewed = dirichlet(labels, 20, 0.1, np.random.default_rng(1), min_samples=5)
    flat = dirichlet(labels, 20, 100.0, np.random.default_rng(1), min_samples=5)
    for part in (skewed, flat):
        check_disjoint_cover(part, labels.size)
        assert part.sizes.min() >= 5
    share = lambda p: (p.label_counts(labels, 10) / p.sizes[:, None]).max(1).mean()  # noqa: E731
    assert share(skewed) > 0.5 and share(flat) < 0.25            # alpha sets the label skew
    # per class: the class's samples are spread over clients (not whole classes per client)
    counts = flat.label_counts(labels, 10)
    np.testing.assert_array_equal(counts.sum(0), np.bincount(labels, minlength=10))


def test_dirichlet_that_cannot_fill_every_client_says_so():
    with pytest.raises(ValueError, match="data.min_samples"):
        dirichlet(labels_of(100), 50, 0.01, np.random.default_rng(0), min_samples=10, max_tries=5)


def test_pathological_gives_each_client_c_label_sorted_shards():
    labels = np.random.default_rng(0).permutation(np.repeat(np.arange(10), 200))   # balanced, as CIFAR
    part = pathological(labels, 10, 2, np.random.default_rng(3))
    check_disjoint_cover(part, labels.size)
    assert (part.sizes == 200).all()
    classes = (part.label_counts(labels, 10) > 0).sum(1)
    assert (classes <= 2).all() and (classes == 2).mean() > 0.5   # shards align with labels here
    uneven = pathological(labels_of(2000), 10, 2, np.random.default_rng(3))
    check_disjoint_cover(uneven, 2000, full=False)
    assert ((uneven.label_counts(labels_of(2000), 10) > 0).sum(1) <= 4).all()   # a shard spans <= 2 labels
    with pytest.raises(ValueError, match="data.partition='x' is unknown"):
        make("x", labels, 10, np.random.default_rng(0))


def test_largest_remainder_rows_sum_to_total_and_follow_shares():
    shares = np.array([[1.0, 1.0, 1.0], [9.0, 1.0, 0.0], [0.0, 0.0, 5.0]])
    got = largest_remainder(shares, 10)
    np.testing.assert_array_equal(got.sum(1), [10, 10, 10])
    np.testing.assert_array_equal(got[1], [9, 1, 0])
    np.testing.assert_array_equal(got[2], [0, 0, 10])
    assert sorted(got[0]) == [3, 3, 4]


def test_local_test_sets_follow_each_clients_label_mix():
    labels = labels_of(2000)
    test_labels = labels_of(1000, seed=5)
    part = dirichlet(labels, 8, 0.3, np.random.default_rng(2), min_samples=5)
    counts = part.label_counts(labels, 10)
    sets = local_test_sets(test_labels, counts, 40, np.random.default_rng(4))
    assert sets.shape == (8, 40)
    for i in range(8):
        assert np.unique(sets[i]).size == 40                      # no image twice within a client
        got = np.bincount(test_labels[sets[i]], minlength=10)
        np.testing.assert_array_equal(got, largest_remainder(counts[i:i + 1].astype(float), 40)[0])


def test_sampler_walks_each_shard_in_epochs_with_a_short_last_batch():
    labels = labels_of(200)
    part = dirichlet(labels, 4, 1.0, np.random.default_rng(0), min_samples=5)
    s = ClientSampler(part, 16, torch.Generator().manual_seed(0))
    sizes = part.sizes
    spe = -(-sizes // 16)
    assert s.steps(None, 2).tolist() == list(2 * spe) and s.steps(3, None).tolist() == [3] * 4
    clients = torch.arange(4)
    got = [[] for _ in range(4)]
    for _ in range(int(spe.max()) * 2):
        act = clients[torch.from_numpy(np.array([len(g) < 2 * spe[i] for i, g in enumerate(got)]))]
        b = s.next(act)
        for j, i in enumerate(act.tolist()):
            real = b.idx[j][b.weight[j] > 0].tolist()
            got[i].append(real)
            assert set(real) <= set(part.client(i).tolist())     # the client's own samples only
    for i in range(4):
        epochs = [sum(got[i][e * spe[i]:(e + 1) * spe[i]], []) for e in range(2)]
        for ep in epochs:                                        # each epoch: a permutation of the shard
            assert sorted(ep) == sorted(part.client(i).tolist())
        assert [len(b) for b in got[i][:spe[i]]] == [16] * (spe[i] - 1) + [sizes[i] - 16 * (spe[i] - 1)]
        assert epochs[0] != epochs[1]                            # reshuffled every epoch


def test_crop_flip_matches_per_image_pad_crop_flip():
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (12, 3, 8, 8), generator=g, dtype=torch.uint8)
    crops = draw_crops((12,), 2, g, "cpu")
    got = crop_flip(images, crops, 2)
    for i in range(12):
        dy, dx, flip = crops[i].tolist()
        want = F.pad(images[i], (2, 2, 2, 2))[:, dy:dy + 8, dx:dx + 8]
        if flip:
            want = want.flip(-1)
        assert torch.equal(got[i], want)


def test_draw_crops_is_uniform():
    c = draw_crops((20000,), 4, torch.Generator().manual_seed(1), "cpu")
    for col, k in ((0, 9), (1, 9), (2, 2)):
        freq = torch.bincount(c[:, col], minlength=k).float() / c.shape[0]
        assert (freq - 1 / k).abs().max() < 0.015                # std ~0.002


def test_train_batch_crops_the_gathered_images():
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (30, 3, 8, 8), generator=g, dtype=torch.uint8)
    labels = torch.arange(30) % 10
    data = Dataset(images, labels, LabelIndex.of(labels), 1 / 255.0, torch.zeros(3), 2)
    idx = torch.randint(0, 30, (2, 5), generator=g)
    crops = draw_crops(idx.shape, 2, g, "cpu")
    x, y = data.train_batch(idx, crops)
    assert x.shape == (2, 5, 3, 8, 8) and torch.equal(y, labels[idx])
    torch.testing.assert_close(x[1, 3], crop_flip(images[idx[1, 3]][None], crops[1, 3][None], 2)[0].float() / 255)


def test_default_local_test_size_fits_the_test_set():
    from vecgossip.data.partition import default_test_size
    test_labels = np.repeat(np.arange(10), 100)                      # 100 test images per class
    even = np.full((10, 10), 50)
    assert default_test_size(test_labels, even) == 100               # ceil(1000 / 10)
    skewed = np.array([[90, 10] + [0] * 8, [10] * 10])               # client 0: 90% class 0
    s = default_test_size(test_labels, skewed)
    assert s == int((100 - 1) / 0.9) < 500                           # ceil(1000 / 2) = 500 would not fit
    sets = local_test_sets(test_labels, skewed, s, np.random.default_rng(0))
    assert sets.shape == (2, s)
