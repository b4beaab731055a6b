"""Step 1 of the tick engine (section III-A): the nodes whose training tick has come take ONE
Caffe SGD step each on a fresh minibatch, batched over every engine of a group (a plain run, a
shard, replicas) and chunked over nodes."""
from __future__ import annotations

import numpy as np
import torch

from vecgossip.algorithms.base import TickAlgorithm
from vecgossip.core.device import gpu_path, upload
from vecgossip.core.guard import Watch, nonfinite
from vecgossip.core.optim import SGDConfig, loss_and_grad, sgd_update, sgd_update_rows
from vecgossip.core.state import NodeState
from vecgossip.data.dataset import Dataset

Tensor = torch.Tensor


def train_rows(state: NodeState, rows: np.ndarray, images: Tensor, crops: Tensor | None, data: Dataset, forward,
               segments: list[tuple[int, SGDConfig]], chunk: int, guard: bool = True, private=None,
               watch: Watch | None = None, flip: Tensor | None = None) -> np.ndarray:
    """One Caffe SGD step of the ``rows`` of ``state`` on their drawn ``images`` (M, B) (and
    ``crops``), ``chunk`` rows at a time, which bounds the activation workspace (N = 2000 LeNet
    nodes on a 24 GiB CPU). ``segments`` [(rows, SGDConfig), ...] split ``rows`` in order into
    runs that share an optimiser config (replicas with their own lr); a chunk never spans two.
    Returns the positions in ``rows`` whose parameters are no longer finite (the divergence
    guard: one row sum per chunk, taken while the chunk is still in cache; empty unless ``guard``).
    On the CPU the rows step where they lie (:func:`~vecgossip.core.optim.sgd_update_rows`: a
    subset's forward reads a gathered copy; no momentum gather, no write-back), every row by the
    same arithmetic whoever else trains; on a GPU a subset's chunk is gathered, stepped and written
    back.
    ``private``: DP-SGD's gradient of a chunk (privacy.*), ``private(theta, x, y, rows, iters)`` ->
    [private gradient per parameter], in place of the plain one; the Caffe SGD steps with it.
    ``watch``: the guard's row sums are noted there, on the device, and none is returned (read
    later: :class:`~vecgossip.core.guard.Watch`). ``flip`` (state rows,) bool: the rows that train
    on flipped labels C - 1 - y (a label-flipping adversary's nodes)."""
    every = rows.size == state.n and bool((rows == np.arange(state.n)).all())
    idx = None if every else upload(rows, state.theta.device)
    # the CPU: every step on the rows where they lie, whichever rows are due, so that a node's
    # numbers never depend on who else trains (a shard's or a replica's rows all due or not)
    in_place = not gpu_path(state.theta) and state.theta.is_contiguous() and state.momentum.is_contiguous()
    sums, start = [], 0
    for count, sgd in segments:
        for lo in range(start, start + count, chunk):
            hi = min(lo + chunk, start + count)
            if every:            # in place
                theta, mom, iters = state.theta[lo:hi], state.momentum[lo:hi], state.iters[lo:hi]
            else:                # the chunk's rows only: the workspace stays at a chunk's size
                ix = idx[lo:hi]
                theta, iters = state.theta.index_select(0, ix), state.iters[ix]
                mom = None if in_place else state.momentum.index_select(0, ix)
            x, y = data.train_batch(images[lo:hi], None if crops is None else crops[lo:hi])
            if flip is not None:
                y = torch.where((flip[lo:hi] if every else flip[ix]).unsqueeze(1), data.num_classes - 1 - y, y)
            if private is None:
                _, grads = loss_and_grad(forward, state.layout, theta, x, y)
            else:
                grads = private(theta, x, y, rows[lo:hi], iters)
            if in_place:         # the CPU: the step on the state's rows where they lie (core/row_kernels.py)
                row_sums = sgd_update_rows(state.theta, state.momentum, rows[lo:hi], grads, iters, state.layout, sgd)
                if state.layout.buffers:          # BatchNorm's running statistics, updated by the forward
                    ps = state.layout.params_size
                    if not every:                 # (every: the forward updated them in place)
                        state.theta[:, ps:].index_copy_(0, ix, theta[:, ps:])
                    row_sums += theta[:, ps:].sum(1, dtype=row_sums.dtype)
                if guard:
                    sums.append(row_sums)
                continue
            sgd_update(theta, mom, grads, iters, state.layout, sgd)
            if not every:
                state.theta.index_copy_(0, ix, theta)
                state.momentum.index_copy_(0, ix, mom)
            if guard:
                sums.append(theta.sum(1))
        start += count
    if every:
        state.iters += 1
    else:
        state.iters[idx] += 1
    if not sums:
        return rows[:0]
    if watch is None:
        return nonfinite(torch.cat(sums))
    watch.note(idx, torch.cat(sums))
    return rows[:0]


def train_due(group, t: int, live: list[int]) -> list[tuple[int, np.ndarray, np.ndarray, np.ndarray | None]]:
    """Step 1 of tick t for the ``live`` engines of ``group`` (engines/group.py): each one's
    due nodes and their draws (:meth:`TickEngine.draw`), then ONE chunked Caffe SGD step over all of
    them (:func:`train_rows`; a chunk spans engines when their optimisers agree), then each
    one's reschedule. Returns [(engine index, its due nodes, those whose parameters are no
    longer finite (every rank agrees), who is online)] for the engines that trained. An
    algorithm with its own :meth:`~vecgossip.algorithms.TickAlgorithm.train` runs it engine
    by engine instead (never bypassed). With the group's guard :class:`~vecgossip.core.guard.Watch`
    (``group.watch``), the non-finite rows are noted on the device, none is reported here: the
    clock reads them when due (:meth:`~vecgossip.engines.tick.clock.TickClock.settle`)."""
    if type(group.engines[0].algorithm).train is not TickAlgorithm.train:
        return [r for r in (group.engines[s].train_own(t, s) for s in live) if r is not None]
    jobs = []                      # (engine index, due, online, rows in the stack, images, crops)
    for s in live:
        e = group.engines[s]
        due, online = e.schedule.due(t)
        if due is not None and due.size:
            mine, images, crops = e.draw(due)
            jobs.append((s, due, online, mine + s * group.rows, images, crops))
    watch = getattr(group, "watch", None)
    if not jobs:
        return []
    bad = train_jobs(group, jobs, watch)                                   # rows of the stack
    out = []
    for s, due, online, _, _, _ in jobs:
        e = group.engines[s]
        mine = bad[(bad >= s * group.rows) & (bad < (s + 1) * group.rows)] - s * group.rows
        if e.privacy is not None:
            e.privacy.count(due)                       # every due node took a private step (every rank)
        e.schedule.reschedule(due)
        out.append((s, due, e.shard.union(mine + e.shard.lo), online))
    return out


def train_jobs(group, jobs: list, watch: Watch | None = None) -> np.ndarray:
    """ONE chunked Caffe SGD step over every engine's due nodes (``jobs`` from :func:`train_due`);
    returns the rows of the stack whose parameters are no longer finite."""
    first = group.engines[jobs[0][0]]
    one = len(jobs) == 1
    rows = jobs[0][3] if one else np.concatenate([j[3] for j in jobs])
    images = jobs[0][4] if one else torch.cat([j[4] for j in jobs])
    crops = jobs[0][5] if one or jobs[0][5] is None else torch.cat([j[5] for j in jobs])
    sgds = [group.engines[j[0]].sgd for j in jobs]
    segments = ([(rows.size, first.sgd)] if all(g == first.sgd for g in sgds)
                else [(j[3].size, g) for j, g in zip(jobs, sgds)])
    private = private_step(group) if first.privacy is not None else None
    flip = None
    if any(e.poisoned is not None for e in group.engines):     # a label-flipping adversary, per replica
        flip = torch.cat([e.poisoned if e.poisoned is not None else torch.zeros(group.rows, dtype=torch.bool,
                                                                                   device=group.state.theta.device)
                          for e in group.engines])
    return rows[train_rows(group.state, rows, images, crops, first.train_data, first.forward, segments,
                           first.train_chunk, first.guard, private, watch, flip)]


def private_step(group):
    """DP-SGD's gradient of a chunk of stack rows (privacy.*): each row's node (its global index)
    and run seed, so that its noise is its own stream's whatever the chunk, shard or replica."""
    glob = np.concatenate([e.node_ids for e in group.engines])
    seeds = np.concatenate([np.full(len(e.node_ids), e.privacy.seed) for e in group.engines])
    head = group.engines[0]

    def grads(theta, x, y, rows, iters):
        return head.privacy.grads(head.forward, head.layout, theta, x, y, None, glob[rows], iters, seeds[rows])[1]
    return grads
