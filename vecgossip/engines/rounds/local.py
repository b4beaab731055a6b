"""Step 1 of the round engine (paper 2, Algorithms 1-2): the participants' K_i local iterations on
minibatches of their own fixed shards, batched over clients (and over the replicas of a group),
chunked so that activations stay bounded:
    SGD:  v <- mu v + (grad F_i(y; xi) + wd y);            y <- y - lr_t v
    SAM:  g = grad F_i(y; xi);  e = rho g / ||g||_2;
          v <- mu v + (grad F_i(y + e; xi) + wd y);        y <- y - lr_t v"""
from __future__ import annotations

import numpy as np
import torch

from vecgossip.algorithms.base import RoundAlgorithm
from vecgossip.core.device import host_copy, upload_indices
from vecgossip.core.optim import local_step
from vecgossip.core.state import NodeState
from vecgossip.data.dataset import Dataset
from vecgossip.data.partition import Minibatch

Tensor = torch.Tensor


def local_iteration(state: NodeState, rows: Tensor, batch, first: int, segments, chunk: int, forward,
                    data: Dataset, step=None, private=None) -> Tensor:
    """One local iteration of the clients at ``rows`` of ``state``, in place (:func:`local_step`,
    ``chunk`` clients at a time); their minibatches are rows ``first``.. of ``batch``.
    ``segments`` [(count, lr, LocalSGDConfig), ...] split ``rows`` in order into runs that share an
    lr and optimiser (replicas may differ); a chunk never spans two. When ``rows`` is every row the
    state is updated in place, else the rows are gathered, trained and written back. ``step``: an
    algorithm's own update of a chunk, ``step(theta, momentum, x, y, weight, lr, rows)`` -> (M,)
    losses, in place of :func:`local_step`; ``private``: DP-SGD's update of a chunk (privacy.*),
    ``private(theta, momentum, x, y, weight, lr, opt, rows, iters)``. Returns the clients' minibatch losses (len(rows),)."""
    every = rows.numel() == state.n
    theta = state.theta if every else state.theta[rows]
    mom = state.momentum if every else state.momentum[rows]
    out, lo = [], 0
    for count, lr, opt in segments:
        for c in range(lo, lo + count, chunk):
            hi = min(c + chunk, lo + count)
            x, y, w = batch.materialise(data, first + c, first + hi)
            if private is not None:
                out.append(private(theta[c:hi], mom[c:hi], x, y, w, lr, opt, rows[c:hi], state.iters[rows[c:hi]]))
            elif step is None:
                out.append(local_step(forward, state.layout, theta[c:hi], mom[c:hi], x, y, w, lr, opt))
            else:
                out.append(step(theta[c:hi], mom[c:hi], x, y, w, lr, rows[c:hi]))
        lo += count
    if not every:
        state.theta[rows] = theta
        state.momentum[rows] = mom
    state.iters[rows] += 1
    return torch.cat(out) if out else state.theta.new_zeros(0)


def local_train(group, parts: list[tuple[int, Tensor, float]]) -> dict[int, float]:
    """Step 1 for the group's engines, ``parts`` [(engine index, participants, lr_t)]: each
    algorithm's :meth:`~vecgossip.algorithms.RoundAlgorithm.local_train` engine by engine (on its
    own rows: never bypassed); for replicas of an algorithm that keeps the default local work, that
    default (K_i steps of the configured optimiser) batched across them (:func:`local_sgd`).
    Returns each engine's mean minibatch loss."""
    engines = group.engines
    algo = engines[0].algorithm
    if group.single or type(algo).local_train is not RoundAlgorithm.local_train:
        return {s: engines[s].local_train(clients, lr) for s, clients, lr in parts}
    losses = local_sgd(group.state, [(engines[s], s * group.rows, clients, lr) for s, clients, lr in parts], algo.sam)
    return {s: loss for (s, _, _), loss in zip(parts, losses)}


def local_sgd(state: NodeState, parts: list, sam: bool | None = None, step=None) -> list[float]:
    """K_i local iterations of the clients of engines over row blocks of ``state``, ``parts``
    [(engine, its first row in state, sorted clients, lr_t)]: step k trains each engine's clients
    with K_i > k, on batches drawn from that engine's sampler for all of them in one call (so
    results do not depend on the chunk size), in ONE chunked pass (:func:`local_iteration`; a chunk
    spans engines when their lr and optimiser agree). Sharded (one engine), this rank trains its
    own clients and the losses are gathered. ``sam``: force SAM on or off (None: optim.sam);
    ``step``: an algorithm's own update of a chunk. Returns each part's mean minibatch loss, a
    0-dim device tensor (read when a metrics row needs it: nothing here waits for the device; who
    trains at each step is decided from the host's step counts)."""
    opts = [e.local_opt(sam) for e, _, _, _ in parts]
    for e, _, clients, _ in parts:
        if e.opt.reset_momentum:
            e.state.momentum[e.local(clients)[0]] = 0
    ks = [e.steps[host_copy(clients)] for e, _, clients, _ in parts]
    losses: list[list[Tensor]] = [[] for _ in parts]
    head = parts[0][0]
    private = private_update(state, parts) if step is None and head.privacy is not None else None
    for k in range(max([int(kk.max()) for kk in ks if kk.size], default=0)):
        acts = step_draws(parts, ks, k)
        if not acts:
            continue
        rows, batch = stacked(acts)
        here = local_iteration(state, rows, batch, 0, segments_of(acts, parts, opts), head.train_chunk,
                               head.forward, head.train_data, step, private)
        lo = 0
        for i, r, _, act_np in acts:
            if private is not None:
                parts[i][0].privacy.count(act_np)
            sh = parts[i][0].shard
            losses[i].append(sh.gather_rows(here[lo:lo + r.numel()], sh.counts(act_np), models=False))
            lo += r.numel()
    return [torch.cat(v).mean() if v else float("nan") for v in losses]


def private_update(state: NodeState, parts: list):
    """DP-SGD's update of a chunk of rows of ``state`` (privacy.*): each row's client (its global
    index) and run seed, so that its noise is its own stream's whatever the chunk, shard or replica."""
    glob = np.zeros(state.n, dtype=np.int64)
    seeds = np.zeros(state.n, dtype=np.int64)
    for e, offset, _, _ in parts:
        rows = np.arange(len(e.node_ids))
        glob[offset + rows] = e.node_ids
        seeds[offset + rows] = e.privacy.seed
    head = parts[0][0]

    def update(theta, momentum, x, y, weight, lr, opt, rows, iters):
        r = rows.cpu().numpy()
        return head.privacy.update(head.forward, head.layout, theta, momentum, x, y, weight, lr, opt,
                                   glob[r], iters, seeds[r])
    return update


def step_draws(parts: list, ks: list[np.ndarray], k: int) -> list:
    """Local iteration k's draws: for each part, its clients with K_i > k, their minibatches drawn
    for all of them (on every rank) and this rank's share: [(part, rows in state, batches, clients)]."""
    acts = []
    for i, ((e, offset, clients, _), kk) in enumerate(zip(parts, ks)):
        c = host_copy(clients)
        if (kk > k).any():
            act = upload_indices(c[kk > k], e.device)
            batch = e.sampler.next(act)                    # every participant's draws, on every rank
            if e.poisoned is not None:                     # a label-flipping adversary's clients
                batch.flip = e.poisoned[act]
            rows, blk, act_np = e.local(act)               # this rank trains its own
            if blk != slice(0, act.numel()):
                batch = Minibatch(batch.idx[blk], batch.weight[blk], None if batch.crops is None else batch.crops[blk],
                                  None if batch.flip is None else batch.flip[blk])
            acts.append((i, rows + offset, batch, act_np))
    return acts


def stacked(acts: list) -> tuple[Tensor, Minibatch]:
    """The parts' rows and minibatches as one."""
    if len(acts) == 1:
        return acts[0][1], acts[0][2]
    crops = None if acts[0][2].crops is None else torch.cat([a[2].crops for a in acts])
    flips = [a[2].flip if a[2].flip is not None else torch.zeros(a[1].numel(), dtype=torch.bool, device=a[1].device)
             for a in acts]
    flip = torch.cat(flips) if any(a[2].flip is not None for a in acts) else None
    return (torch.cat([a[1] for a in acts]),
            Minibatch(torch.cat([a[2].idx for a in acts]), torch.cat([a[2].weight for a in acts]), crops, flip))


def segments_of(acts: list, parts: list, opts: list) -> list[list]:
    """Runs of consecutive parts sharing (lr, optimiser): [count, lr, optimiser] each."""
    segments = []
    for i, r, _, _ in acts:
        lr, opt = parts[i][3], opts[i]
        if segments and segments[-1][1] == lr and segments[-1][2] == opt:
            segments[-1][0] += r.numel()
        else:
            segments.append([r.numel(), lr, opt])
    return segments
