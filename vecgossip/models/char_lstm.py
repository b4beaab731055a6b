"""The FedAvg paper's character LSTM for Shakespeare (McMahan et al. 2017, section 3; LEAF's
``models/shakespeare/stacked_lstm.py``): an 8-dimensional embedding of each of the 80 input
characters, two LSTM layers of 256 units, and a dense layer to the vocabulary's logits of the next
character (``model=char_lstm``, data=shakespeare). ``model.width`` (the ``hidden`` units, 256 by
default) narrows the layers for CPU runs.

:class:`CharLSTM` is the plain module (torch's ``nn.LSTM``, cuDNN / oneDNN where present);
:func:`batched_forward` runs N nodes' LSTMs at once from their stacked parameters (``{name: (N,
...)}``, the module's own names): the embedding gathered per node, each layer's input projection
for all time steps as one batched matmul, then one batched matmul per step for the recurrence
(gates in torch's order i, f, g, o). tests/test_char_lstm.py checks it against the plain module
node by node, forward and gradients."""
from __future__ import annotations

import torch
from torch import nn

Tensor = torch.Tensor
VOCAB_SIZE = 80          # LEAF's vocabulary (vecgossip.data.shakespeare.VOCAB)


class CharLSTM(nn.Module):
    """Embedding (V, 8) -> LSTM(8, H) -> LSTM(H, H) -> Linear(H, V) on the last step's output."""

    def __init__(self, vocab: int = VOCAB_SIZE, embed: int = 8, hidden: int = 256, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, num_layers=layers, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, x: Tensor) -> Tensor:
        """x (B, T) character indices -> (B, V) logits of the character after them."""
        h, _ = self.lstm(self.embed(x))
        return self.out(h[:, -1])


def batched_forward(params: dict[str, Tensor], x: Tensor, layers: int = 2) -> Tensor:
    """N nodes at once: ``params`` {name: (N, ...)} of :class:`CharLSTM`'s parameters, x (N, B, T)
    character indices -> (N, B, V) logits."""
    n, b, t = x.shape
    emb = params["embed.weight"]                                           # (N, V, E)
    inp = emb[torch.arange(n, device=x.device)[:, None, None], x]          # (N, B, T, E)
    for layer in range(layers):
        w_ih, w_hh = params[f"lstm.weight_ih_l{layer}"], params[f"lstm.weight_hh_l{layer}"]   # (N, 4H, I), (N, 4H, H)
        bias = (params[f"lstm.bias_ih_l{layer}"] + params[f"lstm.bias_hh_l{layer}"])[:, None, :]   # (N, 1, 4H)
        hid = w_hh.shape[2]
        pre = torch.bmm(inp.reshape(n, b * t, -1), w_ih.transpose(1, 2)).reshape(n, b, t, 4 * hid)
        h = inp.new_zeros(n, b, hid)
        c = inp.new_zeros(n, b, hid)
        outs = []
        for step in range(t):
            gates = torch.baddbmm(pre[:, :, step] + bias, h, w_hh.transpose(1, 2))      # (N, B, 4H)
            i, f, g, o = gates.chunk(4, dim=2)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            if layer < layers - 1:
                outs.append(h)
        if layer < layers - 1:
            inp = torch.stack(outs, dim=2)                                   # (N, B, T, H)
    return torch.baddbmm(params["out.bias"][:, None, :], h, params["out.weight"].transpose(1, 2))


def of(in_shape: tuple[int, ...] = (80,), num_classes: int = VOCAB_SIZE, width: int = 256) -> CharLSTM:
    """The registry's factory (models/__init__.py): windows of ``in_shape`` = (T,) characters, a
    vocabulary of ``num_classes``, ``width`` hidden units per layer (``model.width``)."""
    if len(in_shape) != 1:
        raise ValueError(f"model=char_lstm reads character windows (T,), got inputs of shape {tuple(in_shape)}")
    return CharLSTM(vocab=num_classes, hidden=int(width))


def explicit_forward(params: dict[str, Tensor], x: Tensor, sink=None, train: bool = True) -> Tensor:
    """:func:`batched_forward` in the engines' forward signature (no dropout, no normalisation:
    ``train`` changes nothing; ``sink`` unused: every gradient comes from autograd)."""
    return batched_forward(params, x)
