"""Step 4 of the tick engine: the metrics of an evaluation tick (per-node accuracy and loss, the
fraction reaching the threshold, per-layer weight variance (Fig. 7) and weight difference
(section III-A)), the transfer-learning peer rule (section III-C3), and the replicas' one batched
evaluation."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from vecgossip.core.correction import layer_variance
from vecgossip.core.metrics import evaluate_ragged, evaluate, evaluate_indexed, evaluate_per_node, weight_difference_rows
from vecgossip.data.sampling import sample_node_batches

Tensor = torch.Tensor


@dataclass
class EvalSet:
    """What every node is evaluated on: the shared images ``x`` (E, ...) / ``y`` (E,), or with
    ``idx`` (N, S) each node's own test images of ``test`` (data.eval_set=local)."""

    x: Tensor
    y: Tensor
    test: object = None
    idx: Tensor | None = None
    sizes: np.ndarray | None = None   # text: (N,) real samples per row of ``idx`` (the rest padding)


class Measures:
    """One metrics row of an evaluation tick: every node's accuracy, or with a relay ``server``
    (a node index) the server's alone; ``diverged`` (N,) the engine's isolated nodes (read)."""

    def __init__(self, state, shard, forward, evals: EvalSet, chunk: int, server: int | None,
                 diverged: np.ndarray, threshold: float) -> None:
        self.state, self.shard, self.forward, self.evals, self.chunk = state, shard, forward, evals, chunk
        self.server, self.diverged, self.threshold = server, diverged, threshold
        self.report = np.arange(shard.n) if server is None else np.array([server])   # the reported nodes
        self.layout, self.device = state.layout, state.theta.device
        self._honest: np.ndarray | None = None     # with an adversary: (n,) the honest nodes, all that is reported

    @property
    def honest(self) -> np.ndarray | None:
        return self._honest

    @honest.setter
    def honest(self, mask: np.ndarray) -> None:
        """An adversary's honest nodes: every metric is theirs (Byzantine nodes are left out)."""
        self._honest = np.asarray(mask, dtype=bool)
        if self.server is None:
            self.report = np.flatnonzero(self._honest)

    def measure(self, t: int, evaluated: tuple[Tensor, Tensor] | None = None) -> tuple[dict, np.ndarray]:
        """One metrics row and the reported nodes' accuracies (``evaluated``: computed already,
        replicas evaluate all their nodes in one batch)."""
        acc, loss = evaluated if evaluated is not None else self.evaluate()
        acc_np, loss_np = acc.cpu().numpy(), loss.cpu().numpy()
        if self._honest is not None and self.server is None and acc_np.size != self.report.size:
            acc_np, loss_np = acc_np[self.report], loss_np[self.report]     # the honest nodes
        gone = self.diverged[self.report]
        if self.diverged.any():          # isolated nodes: NaN in accuracy.npy; accuracy 0 in the mean and min
            acc_np[gone], loss_np[gone] = np.nan, np.nan
        alive = acc_np[~gone]
        counted = np.where(gone, 0.0, acc_np)          # a diverged node counts, as a model that classifies nothing
        row = {"tick": t, "acc_mean": float(np.mean(counted)) if counted.size else np.nan,
               "acc_min": float(np.min(counted)) if counted.size else np.nan,
               "acc_max": float(np.max(alive)) if alive.size else np.nan,
               "frac_reached": float((acc_np >= self.threshold).mean()),
               "loss_mean": float(np.mean(loss_np[~gone])) if alive.size else np.nan,
               "nodes_diverged": int(self.diverged.sum())}
        if self.evals.sizes is not None:           # text: accuracy over every counted node's test windows
            w = self.evals.sizes[self.report].astype(np.float64)
            row["acc_chars"] = float((counted * w).sum() / max(1.0, w.sum()))
        for name, v, d in zip(self.layout.layers, self.layer_variances().cpu().numpy(),
                              self.weight_difference().cpu().numpy()):
            row[f"var_{name}"] = float(v)
            row[f"wdiff_{name}"] = float(d)
        return row, acc_np

    def evaluate(self) -> tuple[Tensor, Tensor]:
        """(accuracy, loss) of the reported nodes, on every rank."""
        theta, sh, ev = self.state.theta, self.shard, self.evals
        if ev.idx is not None and ev.sizes is not None:     # text: each node on all its own test windows
            acc, loss = evaluate_ragged(self.forward, self.layout, theta, ev.test, ev.idx[sh.lo:sh.hi],
                                        ev.sizes[sh.lo:sh.hi], self.chunk)
            return sh.cat_nodes(acc), sh.cat_nodes(loss)
        if ev.idx is not None:                     # data.eval_set=local: each node on its own images
            acc, loss = evaluate_indexed(self.forward, self.layout, theta, ev.test, ev.idx[sh.lo:sh.hi], self.chunk)
            return sh.cat_nodes(acc), sh.cat_nodes(loss)
        if self.server is None:
            acc, loss = evaluate(self.forward, self.layout, theta, ev.x, ev.y, self.chunk)
            return sh.cat_nodes(acc), sh.cat_nodes(loss)
        # federated learning reports the server's model; it is node 0, on rank 0
        acc, loss = (evaluate(self.forward, self.layout, theta[self.report], ev.x, ev.y, self.chunk)
                     if sh.rank == 0 else (None, None))
        return sh.broadcast((acc, loss))

    def counted(self) -> np.ndarray:
        """(n,) the nodes the statistics count: not isolated, and honest."""
        return ~self.diverged if self._honest is None else ~self.diverged & self._honest

    def alive(self) -> np.ndarray:
        return np.flatnonzero(self.counted())

    def layer_variances(self) -> Tensor:
        """(L,) per-layer weight variance averaged over the nodes not isolated (Fig. 7): each
        node's variances are computed where it lives, and averaged over all (one (N, L) gather)."""
        per = self.shard.cat_nodes(layer_variance(self.state.theta, self.layout))      # (N, L)
        return (per if self.counted().all() else per[torch.from_numpy(self.alive()).to(self.device)]).mean(0)

    def weight_difference(self) -> Tensor:
        """(L,) section III-A's diff over the nodes not isolated, in node order (cyclic): each
        rank sums its nodes' |w_next - w_n| per layer, the first live row of the next rank with
        one closing its last; the (live nodes, L) terms are added in node order."""
        sh, theta, dev = self.shard, self.state.theta, self.device
        live = self.counted()
        rows = np.flatnonzero(live[sh.lo:sh.hi])
        counts = sh.counts(np.flatnonzero(live))              # live nodes per rank
        has = counts > 0
        firsts = sh.gather_rows(theta[torch.from_numpy(rows[:1]).to(dev)], has.astype(np.int64), models=False)
        after = [(sh.rank + i) % sh.world for i in range(1, sh.world + 1)]   # the next ranks, cyclic, then me
        nxt = next((q for q in after if has[q]), sh.rank)
        terms = weight_difference_rows(theta, torch.from_numpy(rows).to(dev), firsts[int(has[:nxt].sum())]
                                       .unsqueeze(0) if has.any() else None, self.layout)
        terms = sh.gather_rows(terms, counts, models=False)
        return terms.sum(0) / max(1, terms.shape[0])


class PeerRule:
    """Section III-C3's transfer-learning rule: every ``tl.period`` ticks each node tests itself
    on ``tl.samples`` draws of its own label mix; >= add_at adds one planned peer, <= drop_at drops
    a random one (at most one change)."""

    def __init__(self, tl, wiring, state, shard, forward, test, label_probs: Tensor | None, chunk: int,
                 gen: torch.Generator, rng: np.random.Generator, diverged: np.ndarray) -> None:
        self.tl, self.wiring, self.state, self.shard, self.forward = tl, wiring, state, shard, forward
        self.test, self.label_probs, self.chunk, self.gen, self.rng = test, label_probs, chunk, gen, rng
        self.diverged = diverged

    def update(self, t: int) -> None:
        tl, sh, links = self.tl, self.shard, self.wiring.links
        x, y = sample_node_batches(self.test, self.label_probs, sh.n, tl.samples, self.gen)        # (N, S, ...)
        acc, _ = evaluate_per_node(self.forward, self.state.layout, self.state.theta, x[sh.lo:sh.hi],
                                   y[sh.lo:sh.hi], self.chunk)
        acc = sh.cat_nodes(acc).cpu().numpy()
        add = (acc >= tl.add_at) & ~self.diverged                  # isolated nodes never send again
        changed = links.add_first(add)
        changed |= links.drop_random((acc <= tl.drop_at) & ~add & ~self.diverged, self.rng)  # <= 1 change
        if changed.any():
            self.wiring.rewire()


def evaluate_group(group, live: list[int]) -> dict[int, tuple[Tensor, Tensor]]:
    """Replicas: the accuracy and loss of every live replica's reported nodes, in ONE batched
    evaluation over their rows of the stack. One engine: {} (its :meth:`Measures.measure`
    evaluates, sharded or on local test sets as configured)."""
    if group.single or group.engines[0].measures.evals.idx is not None:   # own test sets: each engine its own
        return {}
    blocks = [group.engines[s].measures.report + s * group.rows for s in live]
    rows = np.concatenate(blocks)
    whole = rows.size == group.state.n and bool((rows == np.arange(group.state.n)).all())
    theta = group.state.theta if whole else group.state.theta[torch.from_numpy(rows).to(group.state.theta.device)]
    first = group.engines[0].measures
    acc, loss = evaluate(first.forward, first.layout, theta, first.evals.x, first.evals.y, first.chunk)
    out, lo = {}, 0
    for s, b in zip(live, blocks):
        out[s] = acc[lo:lo + b.size], loss[lo:lo + b.size]
        lo += b.size
    return out
