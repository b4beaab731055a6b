"""The character models batched over nodes (issue 57, second part) against the plain modules run
node by node (torch's nn.LSTM; the causal transformer's own layers), in float64: logits and
every parameter's gradient."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.func import functional_call

from vecgossip.models.char_lstm import CharLSTM, batched_forward


def check_twin(nets, forward, t: int, b: int) -> None:
    """``forward(stacked, x)`` over the nets' stacked parameters equals each net run alone, logits
    (1e-10) and every parameter's gradient (1e-9) of a summed cross-entropy, float64."""
    n = len(nets)
    stacked = {k: torch.stack([dict(m.named_parameters())[k].detach() for m in nets]).requires_grad_()
               for k, _ in nets[0].named_parameters()}
    x = torch.randint(0, 80, (n, b, t))
    y = torch.randint(0, 80, (n, b))
    got = forward(stacked, x)
    assert got.shape == (n, b, 80)
    F.cross_entropy(got.reshape(n * b, -1), y.reshape(-1), reduction="sum").backward()
    for i, net in enumerate(nets):
        want = net(x[i])
        torch.testing.assert_close(got[i], want, rtol=1e-10, atol=1e-12)
        F.cross_entropy(want, y[i], reduction="sum").backward()
        for k, p in net.named_parameters():
            torch.testing.assert_close(stacked[k].grad[i], p.grad, rtol=1e-9, atol=1e-11)


def test_the_batched_lstm_equals_the_plain_module_node_by_node():
    torch.manual_seed(0)
    check_twin([CharLSTM(hidden=16).double() for _ in range(3)], batched_forward, t=12, b=4)


def test_functional_call_of_the_plain_module_gives_the_same_logits():
    """The plain module under torch.func.functional_call with one node's stacked row: the same
    parameter names and layout the engines' stacked state would hand it."""
    torch.manual_seed(1)
    net = CharLSTM(hidden=8).double()
    params = {k: v.detach()[None] for k, v in net.named_parameters()}
    x = torch.randint(0, 80, (1, 2, 5))
    one = functional_call(net, {k: v[0] for k, v in params.items()}, (x[0],))
    torch.testing.assert_close(batched_forward(params, x)[0], one, rtol=1e-10, atol=1e-12)


def test_the_batched_transformer_equals_the_plain_module_node_by_node():
    """The causal transformer under vmap over stacked parameters against each node's module:
    logits and gradients, float64; and causality: changing the last character changes the hidden
    state at the last position only."""
    from vecgossip.models.char_transformer import CharTransformer, batched_forward as tf_forward
    torch.manual_seed(2)
    t = 10
    nets = [CharTransformer(seq=t, width=16, heads=2, layers=2).double() for _ in range(3)]
    check_twin(nets, lambda stacked, x: tf_forward(nets[0], stacked, x), t=t, b=2)
    x = torch.randint(0, 80, (1, 2, t))
    z = x[0].clone()
    z[:, -1] = (z[:, -1] + 1) % 80                                          # only the last character differs

    def hidden(net, xs):
        h = net.embed(xs) + net.pos[: xs.shape[1]]
        for block in net.blocks:
            h = block(h)
        return h
    with torch.no_grad():
        hx, hz = hidden(nets[0], x[0]), hidden(nets[0], z)
        assert torch.equal(hx[:, :-1], hz[:, :-1])                          # earlier positions cannot see it
        assert not torch.allclose(hx[:, -1], hz[:, -1])
