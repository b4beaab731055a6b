"""The character LSTM batched over nodes (issue 57, second part) against the plain module run
node by node (torch's nn.LSTM), in float64: logits and every parameter's gradient."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.func import functional_call

from vecgossip.models.char_lstm import CharLSTM, batched_forward


def test_the_batched_lstm_equals_the_plain_module_node_by_node():
    torch.manual_seed(0)
    n, b, t, hidden = 3, 4, 12, 16
    nets = [CharLSTM(hidden=hidden).double() for _ in range(n)]
    names = [k for k, _ in nets[0].named_parameters()]
    stacked = {k: torch.stack([dict(m.named_parameters())[k].detach() for m in nets]).requires_grad_()
               for k in names}
    x = torch.randint(0, 80, (n, b, t))
    y = torch.randint(0, 80, (n, b))
    got = batched_forward(stacked, x)
    F.cross_entropy(got.reshape(n * b, -1), y.reshape(-1), reduction="sum").backward()
    for i, net in enumerate(nets):
        want = net(x[i])
        torch.testing.assert_close(got[i], want, rtol=1e-10, atol=1e-12)
        F.cross_entropy(want, y[i], reduction="sum").backward()
        for k, p in net.named_parameters():
            torch.testing.assert_close(stacked[k].grad[i], p.grad, rtol=1e-9, atol=1e-11)
    assert got.shape == (n, b, 80)


def test_functional_call_of_the_plain_module_gives_the_same_logits():
    """The plain module under torch.func.functional_call with one node's stacked row: the same
    parameter names and layout the engines' stacked state would hand it."""
    torch.manual_seed(1)
    net = CharLSTM(hidden=8).double()
    params = {k: v.detach()[None] for k, v in net.named_parameters()}
    x = torch.randint(0, 80, (1, 2, 5))
    one = functional_call(net, {k: v[0] for k, v in params.items()}, (x[0],))
    torch.testing.assert_close(batched_forward(params, x)[0], one, rtol=1e-10, atol=1e-12)
