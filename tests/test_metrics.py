"""Metrics on hand-made accuracy curves and hand-made weights."""
from __future__ import annotations

import numpy as np
import torch

from vecgossip.core.metrics import (first_reach_tick, mean_layer_variance, most_reach_tick, plateau_delay_tick,
                                    reach_count, weight_difference)
from vecgossip.core.state import Layout, ParamSpec


def test_reach_count_is_more_than_90_percent():
    assert reach_count(50) == 46
    assert reach_count(1000) == 901
    assert reach_count(10) == 10


def test_first_and_most_reach():
    ticks = np.array([0, 10, 20, 30, 40])
    acc = np.zeros((5, 10))
    acc[1, 0] = 0.9          # one node reaches 0.9 exactly at tick 10
    acc[2, :9] = 0.95        # 9 of 10 at tick 20: not MORE than 90%
    acc[3, :] = 0.91         # all at tick 30
    acc[4, :] = 0.5
    assert first_reach_tick(ticks, acc) == 10
    assert most_reach_tick(ticks, acc) == 30
    assert most_reach_tick(ticks, acc * 0.5) is None
    assert first_reach_tick(ticks, acc * 0.5) is None


def test_plateau_delay_eq2():
    ticks = np.array([0, 10, 20, 30, 40, 50])
    mean = np.array([0.1, 0.35, 0.36, 0.37, 0.6, 0.7])   # steepest after averaging: 30 -> 40
    assert plateau_delay_tick(ticks, mean, t_first_average=10) == 40
    # if averaging starts at 0, the first interval (+0.25 over 10 ticks) is the steepest
    assert plateau_delay_tick(ticks, mean, t_first_average=0) == 10
    assert plateau_delay_tick(ticks, mean, t_first_average=None) is None


def test_weight_variance_and_difference_by_hand():
    layout = Layout((ParamSpec("a.weight", (2,), 0, 2), ParamSpec("a.bias", (1,), 2, 3),
                     ParamSpec("b.weight", (1,), 3, 4)))
    theta = torch.tensor([[0.0, 2.0, 9.0, 1.0],
                          [1.0, 1.0, 9.0, 3.0],
                          [4.0, 0.0, 9.0, 0.0]])
    # layer a: variances 1, 0, 4 -> mean 5/3; layer b: single element, variance 0
    torch.testing.assert_close(mean_layer_variance(theta, layout), torch.tensor([5 / 3, 0.0]))
    # diff a: |n1-n0| = 1+1, |n2-n1| = 3+1, |n0-n2| = 4+2 -> 12/3; b: 2 + 3 + 1 = 6 -> 2
    torch.testing.assert_close(weight_difference(theta, layout), torch.tensor([4.0, 2.0]))


def test_weight_difference_chunking_matches_roll():
    layout = Layout((ParamSpec("a.weight", (5,), 0, 5), ParamSpec("b.weight", (3,), 5, 8)))
    theta = torch.randn(7, 8, generator=torch.Generator().manual_seed(0))
    want = torch.stack([(torch.roll(theta[:, a:b], -1, 0) - theta[:, a:b]).abs().sum() / 7 for a, b in ((0, 5), (5, 8))])
    for chunk in (1, 3, 7, 100):
        torch.testing.assert_close(weight_difference(theta, layout, chunk), want)


def test_weight_difference_rows_subset_and_wrap():
    """The per-node terms for a subset of rows in order, the last one closed by ``wrap`` (a row held
    by another shard): hand-computed |next - this| sums per layer."""
    from vecgossip.core.metrics import weight_difference_rows
    from vecgossip.core.state import Layout
    layout = Layout.of(torch.nn.Sequential(torch.nn.Linear(2, 1, bias=False)))      # one layer, 2 weights
    theta = torch.tensor([[0.0, 0.0], [1.0, 2.0], [5.0, 5.0], [-1.0, 1.0]])
    wrap = torch.tensor([[10.0, 10.0]])
    terms = weight_difference_rows(theta, torch.tensor([0, 2, 3]), wrap, layout)
    # 0 -> 2: |5|+|5| = 10; 2 -> 3: |-6|+|-4| = 10; 3 -> wrap: |11|+|9| = 20
    assert terms.flatten().tolist() == [10.0, 10.0, 20.0]


def test_evaluation_in_image_blocks_equals_all_at_once():
    """``images`` (big models) splits each node's samples into blocks: the same accuracy and loss."""
    from vecgossip.core.metrics import evaluate_per_node
    from vecgossip.models import get_model, make_forward
    from vecgossip.core.state import Layout, init_theta
    layout = Layout.of(get_model("mlp").factory())
    g = torch.Generator().manual_seed(0)
    theta = init_theta(layout, 3, "torch", g)
    x, y = torch.rand(3, 50, 1, 28, 28, generator=g), torch.randint(0, 10, (3, 50), generator=g)
    fwd = make_forward("mlp")
    for chunk in (3, 1):                                        # a chunk of nodes, and lone nodes
        acc, loss = evaluate_per_node(fwd, layout, theta, x, y, chunk)
        acc_b, loss_b = evaluate_per_node(fwd, layout, theta, x, y, chunk, images=20)
        assert torch.equal(acc, acc_b)
        torch.testing.assert_close(loss_b, loss, rtol=1e-6, atol=0)


def test_shared_image_evaluation_matches_per_node_modules():
    """metrics.evaluate hands LeNet and the CNN the shared images once (conv1 as one GEMM over their
    columns, layers.first_conv): every node's accuracy and loss equal those of its own nn.Module on
    the same images (the loop twin), whatever the chunk (lone nodes included); on LeNet (one input
    channel) the first layer's output is bit-identical to the grouped convolution's."""
    import torch.nn.functional as F

    from vecgossip.core.metrics import evaluate, evaluate_per_node
    from vecgossip.models import get_model, make_forward
    from vecgossip.core.layers import SharedImages, first_conv
    from vecgossip.core.state import Layout, init_theta, load_flat
    for name, shape in (("lenet", (1, 28, 28)), ("cnn", (3, 32, 32))):
        model = get_model(name)
        layout = Layout.of(model.factory(shape, 10))
        g = torch.Generator().manual_seed(0)
        theta = init_theta(layout, 5, "torch", g)
        x, y = torch.randn(40, *shape, generator=g), torch.randint(0, 10, (40,), generator=g)
        fwd = make_forward(name)
        assert fwd.shared_kernel == 5
        want_acc, want_loss = [], []
        for i in range(5):                                       # the per-node loop of modules
            net = model.factory(shape, 10)
            load_flat(net, layout, theta[i])
            with torch.no_grad():
                logits = net(x)
            want_acc.append((logits.argmax(1) == y).float().mean())
            want_loss.append(F.cross_entropy(logits, y))
        want_acc, want_loss = torch.stack(want_acc), torch.stack(want_loss)
        for chunk in (5, 2, 1):
            acc, loss = evaluate(fwd, layout, theta, x, y, chunk)
            assert torch.equal(acc, want_acc), (name, chunk)
            torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=0)
            acc_g, loss_g = evaluate_per_node(fwd, layout, theta, x.expand(5, *x.shape), y.expand(5, -1), chunk)
            assert torch.equal(acc_g, acc)                       # the grouped path (per-node copies)
            torch.testing.assert_close(loss_g, loss, rtol=1e-6, atol=0)
        p = layout.views(theta)
        shared = first_conv(p, "conv1", SharedImages.of(x, 5), 5)
        grouped = first_conv(p, "conv1", x.expand(5, *x.shape), 5)
        assert shared.shape == grouped.shape and shared.is_contiguous(memory_format=torch.channels_last)
        if name == "lenet":
            assert torch.equal(shared, grouped)
        else:
            torch.testing.assert_close(shared, grouped, rtol=1e-5, atol=1e-5)


def test_shared_images_only_when_their_columns_are_small():
    """The first layer's columns are k*k times the images: paper 1's 100 MNIST images take the
    shared path, the full 10,000-image test set and 500 CIFAR images keep per-node copies."""
    from vecgossip.core.layers import SharedImages
    assert SharedImages.fits(torch.zeros(100, 1, 28, 28), 5)
    assert not SharedImages.fits(torch.zeros(10_000, 1, 28, 28), 5)
    assert not SharedImages.fits(torch.zeros(500, 3, 32, 32), 5)


def test_consensus_distance_in_byte_budgeted_chunks_equals_its_definition():
    """(1/m) sum_i ||x_i - x_bar||^2 against numpy in float64, whole and in chunks of one row (a
    budget below one row's bytes), so a chunk never holds more than its budget."""
    import numpy as np
    import torch

    from vecgossip.core.metrics import consensus_distance
    x = np.random.default_rng(0).normal(size=(7, 5))
    want = float(((x - x.mean(0)) ** 2).sum(1).mean())
    t = torch.from_numpy(x)
    assert abs(consensus_distance(t) - want) < 1e-12
    assert abs(consensus_distance(t, budget=1) - want) < 1e-12
