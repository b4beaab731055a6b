"""A small causal transformer for next-character prediction on Shakespeare (issue 57, second part:
``model=char_transformer``, data=shakespeare): character and position embeddings (width ``width``),
``layers`` pre-norm blocks of causal multi-head self-attention (``heads``) and a 4x MLP, a final
layer norm, and the vocabulary's logits of the character after the window, read at its last
position. Written with plain layers (no fused attention module), so that
:func:`batched_forward` runs N nodes at once as ``torch.func.vmap`` of ``functional_call`` over
their stacked parameters, the registry's generic path (tests/test_char_lstm.py checks it node by
node)."""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.func import functional_call, vmap

from vecgossip.models.char_lstm import VOCAB_SIZE

Tensor = torch.Tensor


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: Tensor) -> Tensor:
        b, t, w = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(w, dim=2)
        q, k, v = (a.reshape(b, t, self.heads, w // self.heads).transpose(1, 2) for a in (q, k, v))
        score = q @ k.transpose(2, 3) / math.sqrt(w // self.heads)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = score.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, w))
        return x + self.mlp(self.norm2(x))


class CharTransformer(nn.Module):
    """x (B, T) character indices -> (B, V) logits of the next character."""

    def __init__(self, vocab: int = VOCAB_SIZE, seq: int = 80, width: int = 64, heads: int = 4,
                 layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.pos = nn.Parameter(torch.zeros(seq, width).normal_(0.0, 0.02))
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.out = nn.Linear(width, vocab)

    def forward(self, x: Tensor) -> Tensor:
        h = self.embed(x) + self.pos[: x.shape[1]]
        for block in self.blocks:
            h = block(h)
        return self.out(self.norm(h[:, -1]))


def batched_forward(module: CharTransformer, params: dict[str, Tensor], x: Tensor) -> Tensor:
    """N nodes at once: ``params`` {name: (N, ...)} of ``module``'s parameters, x (N, B, T) ->
    (N, B, V) logits (vmap of functional_call over the node dimension)."""
    return vmap(lambda p, xi: functional_call(module, p, (xi,)))(params, x)


def of(in_shape: tuple[int, ...] = (80,), num_classes: int = VOCAB_SIZE, width: int = 64) -> CharTransformer:
    """The registry's factory: windows of ``in_shape`` = (T,) characters, ``width`` the embedding
    width (``model.width``, a multiple of the 4 heads), 2 blocks."""
    if len(in_shape) != 1:
        raise ValueError(f"model=char_transformer reads character windows (T,), got inputs of shape {tuple(in_shape)}")
    if int(width) % 4:
        raise ValueError(f"model.width={width} must be a multiple of the transformer's 4 heads")
    return CharTransformer(vocab=num_classes, seq=in_shape[0], width=int(width))
