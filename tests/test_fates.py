"""One fate per message and step (issue 49): an algorithm that mixes W, then another matrix V over the
same links, then an equal copy of W, at one step under faults.drop, sees the same lost messages
every time, on both engines (before, the realization was kept per Python object: V evicted W, and
the copy drew its losses anew). Through the API, with algorithms of one's own by dotted path; the
realized matrix is read back by mixing the identity."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

import vecgossip
from vecgossip.algorithms import RoundAlgorithm, TickAlgorithm

SEEN: list = []


def ring(n: int, self_weight: float) -> sp.csr_matrix:
    """A ring's doubly stochastic matrix with ``self_weight`` on the diagonal."""
    off = (1 - self_weight) / 2
    w = np.eye(n) * self_weight
    for i in range(n):
        w[i, (i + 1) % n] = w[i, (i - 1) % n] = off
    return sp.csr_matrix(w)


def realized(mix, n: int, w) -> np.ndarray:
    """The matrix as delivered: W_realized @ I."""
    return mix(torch.eye(n, dtype=torch.float64), w).numpy()


def lost(a: np.ndarray, w: sp.csr_matrix) -> set:
    """The links i <- j whose weight did not arrive."""
    d = w.toarray()
    return {(i, j) for i, j in zip(*np.nonzero(d)) if i != j and a[i, j] == 0}


def record(mix, n: int) -> None:
    w, v = ring(n, 1 / 3), ring(n, 1 / 2)
    first, other, again = realized(mix, n, w), realized(mix, n, v), realized(mix, n, w.copy())
    SEEN.append((lost(first, w), lost(other, v), lost(again, w), np.array_equal(first, again)))


class MixThriceRounds(RoundAlgorithm):
    """D-PSGD's gossip, after mixing W, V and a copy of W over a ring (recorded)."""

    def communicate(self, ctx, t, clients):
        record(lambda x, w: ctx.mix(x.to(ctx.state.theta.dtype), t, 0, w).double(), ctx.m)
        return ctx.gossip(t, clients)


class MixThriceTicks(TickAlgorithm):
    """Gossip learning (beta 0.5), after mixing W, V and a copy of W at the tick (recorded)."""

    def after_train(self, ctx, t, senders, online):
        record(lambda x, w: ctx.mix(x.to(ctx.state.theta.dtype), w, t).double(), ctx.n)
        ctx.send_models(senders, online, t)
        ctx.average(t, online, 0.5, False)


def check() -> None:
    assert SEEN and any(first for first, _, _, _ in SEEN)          # messages were lost
    for first, other, again, same in SEEN:
        assert first == other == again and same


def test_the_round_engine_keeps_one_fate_per_message(data_root, tmp_path):
    SEEN.clear()
    vecgossip.run(vecgossip.compose(overrides=[
        "method=dpsgd", "algorithm._target_=test_fates.MixThriceRounds", "data=mnist", "model=mlp", "clients=6",
        "topology=ring", "rounds=3", "eval_every=3", "faults.drop=0.3", "data.local_test_size=10",
        "data.global_test_size=50", f"data_root={data_root}", "progress=false"]), run_dir=tmp_path)
    assert len(SEEN) == 3
    check()


def test_the_tick_engine_keeps_one_fate_per_message(data_root, tmp_path):
    SEEN.clear()
    vecgossip.run(vecgossip.compose(overrides=[
        "algorithm._target_=test_fates.MixThriceTicks", "~algorithm.beta", "~algorithm.R", "~algorithm.correction",
        "~algorithm.compression", "~algorithm.tl", "model=mlp", "nodes=6", "topology=ring", "max_ticks=25",
        "eval_every=25", "faults.drop=0.3", f"data_root={data_root}", "progress=false"]), run_dir=tmp_path)
    assert len(SEEN) >= 3
    check()
