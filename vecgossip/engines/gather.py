"""The nonlinear half of communication (issue 37), both engines: each receiver's incoming messages
handed over as a block, ``(rows, d_max, ...)`` with a mask, in chunks of receivers bounded in
bytes, so that a 1000-node network never holds ``(N, d, P)`` at once; the algorithm's reduction
turns each block into one row per receiver. A message is any node-first tensor the algorithm
computes (its model, a compressed difference); an adversary may replace what its nodes send,
per receiver (:mod:`vecgossip.runtime.adversary`). Sharded, a rank first obtains from the other
ranks the rows its receivers need (one ``all_to_all``, planned from W, which every rank holds).

A linear reduction (a weighted sum) is what ``mix`` computes faster with one sparse product; the
gather is for what is not linear: clipping, medians, trimmed means, per-link state."""
from __future__ import annotations

from typing import Callable

import numpy as np
import scipy.sparse as sp
import torch

from vecgossip.algorithms.base import Block
from vecgossip.core.errors import ConfigError
from vecgossip.network.neighbourhoods import Neighbourhoods
from vecgossip.runtime.memory import BUDGET     # bytes of messages one block holds at most

Tensor = torch.Tensor


def chunk_rows(nb: Neighbourhoods, row_bytes: int, budget: int = BUDGET) -> int:
    """Receivers per block: as many as keep ``(r, d_max, row)`` within ``budget`` bytes (at least one)."""
    return max(1, budget // max(1, (nb.d_max + 1) * row_bytes))


def sender_rows(x: Tensor, w: sp.spmatrix, shard) -> tuple[Tensor, Tensor]:
    """The rows of ``x`` (this process's, (m', ...)) that this rank's receivers need, and for every
    global node its position in them (-1: not here). One process: ``x`` itself. Sharded: this
    rank's rows and, by ``all_to_all``, the other ranks' rows its receivers hear from."""
    n = shard.n
    if not shard.sharded:
        return x, torch.arange(n, device=x.device)
    coo = sp.csr_matrix(w).tocoo()
    need = np.zeros((shard.world, n), dtype=bool)           # need[r, j]: rank r's receivers hear from j
    need[shard.owner(coo.row), coo.col] = True
    need[shard.rank, shard.lo:shard.hi] = False               # its own rows it has
    mine = slice(shard.lo, shard.hi)
    cols = np.flatnonzero(need[shard.rank])
    got = shard.exchange_rows(x.reshape(x.shape[0], -1), [np.flatnonzero(need[r, mine]) for r in range(shard.world)],
                              shard.counts(cols)).reshape(-1, *x.shape[1:])
    table = torch.cat([x, got])
    position = torch.full((n,), -1, dtype=torch.long, device=x.device)
    position[shard.lo:shard.hi] = torch.arange(shard.size, device=x.device)
    position[torch.from_numpy(cols).to(x.device)] = shard.size + torch.arange(cols.size, device=x.device)
    return table, position


def plugin_name(fn) -> str:
    """A callable's dotted name, as a user would look it up (``mypkg.MyRule.aggregate``)."""
    owner = getattr(fn, "__self__", None)
    if owner is not None and not isinstance(owner, type):
        cls = type(owner)
        return f"{cls.__module__}.{cls.__qualname__}.{fn.__name__}"
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def checked_forge(forge: Callable[[Block], Block], block: Block) -> Block:
    """``forge(block)``, its messages checked to be the block's shape and dtype (one line naming the
    attack otherwise)."""
    got = forge(block)
    msgs = got.msgs if isinstance(got, Block) else got
    want = block.msgs
    if not isinstance(msgs, Tensor) or msgs.shape != want.shape or msgs.dtype != want.dtype:
        attack = getattr(getattr(forge, "__self__", None), "attack", None)
        name = f"{type(attack).__module__}.{type(attack).__qualname__}.forge" if attack is not None else plugin_name(forge)
        shape = f"{tuple(msgs.shape)} {msgs.dtype}" if isinstance(msgs, Tensor) else type(msgs).__name__
        raise ConfigError(f"{name} returned messages {shape} for a block whose messages are "
                          f"{tuple(want.shape)} {want.dtype}: an attack returns the block's messages with the "
                          "Byzantine entries replaced (same shape and dtype)")
    return got


def gather(x: Tensor, nb: Neighbourhoods, w: sp.spmatrix, shard, reduce: Callable[[Block], Tensor],
           forge: Callable[[Block], Block] | None = None, slots: Tensor | None = None, t: int = 0,
           budget: int = BUDGET) -> Tensor:
    """``reduce`` over the blocks of this rank's receivers' messages of ``x`` (m', ...): the
    results, one row per receiver, concatenated (m', ...). ``forge``: what an adversary does to a
    block before it is reduced; ``slots`` (m', d_max): each message's neighbour slot."""
    table, position = sender_rows(x, w, shard)
    row_bytes = x[0].numel() * x.element_size() if x.shape[0] else 0
    step = chunk_rows(nb, row_bytes, budget)
    out = torch.empty_like(x)        # the results, written block by block (no list to concatenate)
    for lo in range(0, len(nb.receivers), step):
        sub = nb.rows(lo, lo + step)
        first = int(sub.receivers[0]) - shard.lo if len(sub.receivers) else 0
        rows = torch.arange(first, first + len(sub.receivers), device=x.device)    # a rank's receivers: a range
        block = Block(sub.receivers, rows, x[first:first + len(rows)], None, sub.index, sub.mask, sub.weight,
                      sub.self_weight, None if slots is None else slots[lo:lo + step], t,
                      source=(table, position[sub.index], position[rows + shard.lo]), dest=out[lo:lo + len(rows)])
        if forge is not None:
            block = checked_forge(forge, block)
        got = reduce(block)
        if not isinstance(got, Tensor) or got.dim() == 0 or got.shape[0] != len(rows):
            shape = tuple(got.shape) if isinstance(got, Tensor) else type(got).__name__
            raise ConfigError(f"{plugin_name(reduce)} returned {shape} for a block of {len(rows)} receivers: a "
                              f"reduction returns one row per receiver, ({len(rows)}, ...) (messages "
                              f"{tuple(block.msgs.shape)}, own {tuple(block.own.shape)})")
        if got.shape[1:] != out.shape[1:] or got.dtype != out.dtype:   # a reduction to another shape
            if lo:
                raise ValueError(f"gather: the reduction returned {tuple(got.shape)} {got.dtype}, earlier "
                                 f"blocks {tuple(out.shape[1:])} {out.dtype} per receiver")
            out = got.new_empty((len(nb.receivers), *got.shape[1:]))
        dest = out[lo:lo + got.shape[0]]
        if got.data_ptr() != dest.data_ptr():
            dest.copy_(got)
    return out
