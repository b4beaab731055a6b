"""Buffer and Eq. 1 semantics on a hand-built 4-node graph with fixed "models", against values
computed by hand: asynchronous senders, a sender that appears twice in one buffer, per-node
buffer sizes R*deg, and variance correction on the result."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from vecgossip.engines.tick.buffer import Buffers, average_full
from vecgossip.network.mixing import SendOperator, adjacency
from vecgossip.core.state import Layout, ParamSpec
from vecgossip.network.topology import Graph

# one "layer" with a 2-element weight and a 1-element bias: theta row = [w0, w1, b]
LAYOUT = Layout((ParamSpec("fc.weight", (1, 2), 0, 2), ParamSpec("fc.bias", (1,), 2, 3)))
# edges 0-1, 0-2, 1-2, 2-3: degrees 2, 2, 3, 1
GRAPH = Graph(4, np.array([[0, 1], [0, 2], [1, 2], [2, 3]]))


def setup():
    send = SendOperator(adjacency(GRAPH), "cpu")
    buf = Buffers.empty(4, 3, 1, "cpu")
    buf.total, buf.var_total = buf.total.double(), buf.var_total.double()  # exact hand arithmetic
    theta = torch.tensor([[0.0, 2.0, 1.0],     # node 0
                          [4.0, 8.0, 3.0],     # node 1
                          [1.0, 1.0, 0.0],     # node 2
                          [6.0, 0.0, -1.0]], dtype=torch.float64)   # node 3
    size = torch.tensor([2.0, 2.0, 3.0, 1.0])  # R = 1: buffer_size = degree
    return send, buf, theta, size


def deliver(send, buf, theta, senders):
    a_sub, counts = send.select(np.array(senders))
    buf.receive(a_sub.to(theta.dtype), counts, theta[senders], LAYOUT)


def run_sequence(beta: float, correction: bool):
    """Three asynchronous ticks; returns theta, buffer counts and who averaged at each tick."""
    send, buf, theta, size = setup()
    log = []
    # tick a: node 1 sends m1 = [4, 8, 3] to 0 and 2; nobody is full (0: 1/2, 2: 1/3)
    deliver(send, buf, theta, [1])
    log.append((average_full(theta, buf, size, beta, correction, LAYOUT).tolist(), buf.count.tolist()))
    # tick b: node 1 has trained again, m1' = [2, 0, 1], and sends again: node 0 now holds
    # {m1, m1'} (the same sender twice) and is full
    theta[1] = torch.tensor([2.0, 0.0, 1.0], dtype=torch.float64)
    deliver(send, buf, theta, [1])
    log.append((average_full(theta, buf, size, beta, correction, LAYOUT).tolist(), buf.count.tolist()))
    snapshot0 = theta[0].clone()
    # tick c: nodes 0 and 3 send; node 2 gets new0 and m3 -> 4 models >= 3; node 1 gets new0 (1/2)
    deliver(send, buf, theta, [0, 3])
    log.append((average_full(theta, buf, size, beta, correction, LAYOUT).tolist(), buf.count.tolist()))
    return theta, log, snapshot0


def test_async_buffers_repeated_sender_eq1():
    theta, log, new0 = run_sequence(beta=0.5, correction=False)
    assert log[0] == ([], [1, 0, 1, 0])
    assert log[1] == ([0], [0, 0, 2, 0])
    assert log[2] == ([2], [0, 1, 0, 0])
    # new0 = 0.5*[0,2,1] + 0.5*([4,8,3] + [2,0,1])/2 = [1.5, 3, 1.5]
    assert new0.tolist() == pytest.approx([1.5, 3.0, 1.5])
    # new2 = 0.5*[1,1,0] + 0.5*([4,8,3] + [2,0,1] + [1.5,3,1.5] + [6,0,-1])/4
    assert theta[2].tolist() == pytest.approx([2.1875, 1.875, 0.5625])
    # untouched: node 1 (buffer not full), node 3 (received nothing)
    assert theta[1].tolist() == [2.0, 0.0, 1.0]
    assert theta[3].tolist() == [6.0, 0.0, -1.0]


def test_async_buffers_with_variance_correction_beta0():
    theta, log, new0 = run_sequence(beta=0.0, correction=True)
    # node 0 at tick b: avg w = ([4,8]+[2,0])/2 = [3,4] (mean 3.5, var 0.25); received weight
    # variances 4 and 1 -> target 2.5 -> w = 3.5 -+ sqrt(2.5); bias (3+1)/2 = 2 is not rescaled
    r = 2.5 ** 0.5
    assert new0.tolist() == pytest.approx([3.5 - r, 3.5 + r, 2.0])
    # node 2 at tick c: received m1 [4,8] var 4, m1' [2,0] var 1, new0 var 2.5, m3 [6,0] var 9
    # target = 16.5/4 = 4.125; avg w = ([4,8]+[2,0]+new0_w+[6,0])/4 = [(15.5-r)/4, (11.5+r)/4]
    a, b = (15.5 - r) / 4, (11.5 + r) / 4
    mean, half = (a + b) / 2, 4.125 ** 0.5
    assert theta[2].tolist() == pytest.approx([mean + half, mean - half, (3 + 1 + 2 - 1) / 4])


def test_full_send_equals_dense_adjacency_sum():
    send, buf, theta, size = setup()
    a_full, counts = send.select(None)
    buf.receive(a_full.to(theta.dtype), counts, theta, LAYOUT)
    dense = torch.zeros(4, 4, dtype=torch.float64)
    for i, j in GRAPH.edges:
        dense[i, j] = dense[j, i] = 1
    assert torch.allclose(buf.total, dense @ theta)
    assert buf.count.tolist() == [2, 2, 3, 1]


def test_sparse_and_dense_full_operators_agree():
    """Sparse graphs use CSR SpMM, dense ones a GEMM: both deliver the same sums."""
    from vecgossip.network.topology import build
    for g in (build("ring", 100), build("complete", 5)):
        send = SendOperator(adjacency(g), "cpu")
        assert (send.full.layout == torch.strided) == (g.n == 5)
        x = torch.randn(g.n, 3, dtype=torch.float64)
        buf = Buffers.empty(g.n, 3, 1, "cpu")
        buf.total = buf.total.double()
        a, c = send.select(None)
        buf.receive(a.to(torch.float64), c, x, LAYOUT)
        dense = torch.from_numpy(adjacency(g).toarray()).double()
        torch.testing.assert_close(buf.total, dense @ x)
        torch.testing.assert_close(buf.count, dense.sum(1).float())
