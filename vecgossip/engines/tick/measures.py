"""Step 4 of the tick engine: the metrics of an evaluation tick (per-node accuracy and loss, the
fraction reaching the threshold, per-layer weight variance (Fig. 7) and weight difference
(section III-A)), the transfer-learning peer rule (section III-C3), and the replicas' one batched
evaluation. :class:`TickMeasures` is a part of :class:`~vecgossip.engines.tick.TickEngine`."""
from __future__ import annotations

import numpy as np
import torch

from vecgossip.core.correction import layer_variance
from vecgossip.data.sampling import sample_node_batches
from vecgossip.core.metrics import evaluate, evaluate_indexed, evaluate_per_node, weight_difference_rows

Tensor = torch.Tensor


class TickMeasures:
    """Step 4: what an evaluation tick records, and the peer rule."""

    def measure(self, t: int, evaluated: tuple[Tensor, Tensor] | None = None) -> tuple[dict, np.ndarray]:
        """One metrics row and the reported nodes' accuracies. ``evaluated``: their (accuracy,
        loss) computed already (replicas evaluate all their nodes in one batch)."""
        theta, sh = self.state.theta, self.shard
        if evaluated is not None:
            acc, loss = evaluated
        elif self.eval_idx is not None:            # data.eval_set=local: each node on its own images
            acc, loss = evaluate_indexed(self.forward, self.layout, theta, self.test_data,
                                         self.eval_idx[sh.lo:sh.hi], self.cfg.eval_chunk)
            acc, loss = sh.cat_nodes(acc), sh.cat_nodes(loss)
        elif self.cfg.server is None:
            acc, loss = evaluate(self.forward, self.layout, theta, self.eval_x, self.eval_y, self.cfg.eval_chunk)
            acc, loss = sh.cat_nodes(acc), sh.cat_nodes(loss)
        else:   # federated learning reports the server's model; it is node 0, on rank 0
            acc, loss = (evaluate(self.forward, self.layout, theta[self.report], self.eval_x, self.eval_y,
                                  self.cfg.eval_chunk) if sh.rank == 0 else (None, None))
            acc, loss = sh.broadcast((acc, loss))
        acc_np, loss_np = acc.cpu().numpy(), loss.cpu().numpy()
        gone = self.diverged[self.report]
        if self.diverged.any():          # isolated nodes: NaN in accuracy.npy, left out of every statistic
            acc_np[gone], loss_np[gone] = np.nan, np.nan
        var = self.layer_variances().cpu().numpy()
        wdiff = self.weight_difference().cpu().numpy()
        alive = acc_np[~gone]
        row = {"tick": t, "acc_mean": float(np.mean(alive)) if alive.size else np.nan,
               "acc_min": float(np.min(alive)) if alive.size else np.nan,
               "acc_max": float(np.max(alive)) if alive.size else np.nan,
               "frac_reached": float((acc_np >= self.cfg.threshold).mean()),
               "loss_mean": float(np.mean(loss_np[~gone])) if alive.size else np.nan,
               "nodes_diverged": int(self.diverged.sum())}
        for name, v, d in zip(self.layout.layers, var, wdiff):
            row[f"var_{name}"] = float(v)
            row[f"wdiff_{name}"] = float(d)
        if self.cfg.tl is not None:
            row["links_active"] = int(self.links.active.sum())
        if self.faults is not None:
            row.update(messages_sent=self.faults.sent, messages_lost=self.faults.lost, nodes_online=self.online_now)
        return row, acc_np

    def alive(self) -> np.ndarray:
        return np.flatnonzero(~self.diverged)

    def layer_variances(self) -> Tensor:
        """(L,) per-layer weight variance averaged over the nodes not isolated (Fig. 7): each
        node's variances are computed where it lives, and averaged over all (one (N, L) gather)."""
        per = self.shard.cat_nodes(layer_variance(self.state.theta, self.layout))      # (N, L)
        return (per if not self.diverged.any() else per[torch.from_numpy(self.alive()).to(self.device)]).mean(0)

    def weight_difference(self) -> Tensor:
        """(L,) section III-A's diff over the nodes not isolated, in node order (cyclic): each
        rank sums its nodes' |w_next - w_n| per layer, the first live row of the next rank with
        one closing its last; the (live nodes, L) terms are added in node order."""
        sh, theta, dev = self.shard, self.state.theta, self.device
        live = ~self.diverged
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

    def update_peers(self, t: int) -> None:
        """Transfer-learning rule (III-C3): test on ``samples`` draws of the node's own label mix;
        >= add_at adds one planned peer, <= drop_at drops a random one (at most one change)."""
        tl = self.cfg.tl
        n = self.n
        probs = self.label_probs
        sh = self.shard
        x, y = sample_node_batches(self.test_data, probs, n, tl.samples, self.gen)        # (N, S, ...)
        acc, _ = evaluate_per_node(self.forward, self.layout, self.state.theta, x[sh.lo:sh.hi], y[sh.lo:sh.hi],
                                   self.cfg.eval_chunk)
        acc = sh.cat_nodes(acc).cpu().numpy()
        add = (acc >= tl.add_at) & ~self.diverged                  # isolated nodes never send again
        changed = self.links.add_first(add)
        changed |= self.links.drop_random((acc <= tl.drop_at) & ~add & ~self.diverged, self.rng)  # <= 1 change
        if changed.any():
            self.rewire()


def evaluate_group(group, live: list[int]) -> dict[int, tuple[Tensor, Tensor]]:
    """Replicas: the accuracy and loss of every live replica's reported nodes, in ONE batched
    evaluation over their rows of the stack. One engine: {} (its :meth:`TickEngine.measure`
    evaluates, sharded or on local test sets as configured)."""
    if group.single:
        return {}
    blocks = [group.engines[s].report + s * group.rows for s in live]
    rows = np.concatenate(blocks)
    whole = rows.size == group.state.n and bool((rows == np.arange(group.state.n)).all())
    theta = group.state.theta if whole else group.state.theta[torch.from_numpy(rows).to(group.state.theta.device)]
    first = group.engines[0]
    acc, loss = evaluate(first.forward, first.layout, theta, first.eval_x, first.eval_y, first.cfg.eval_chunk)
    out, lo = {}, 0
    for s, b in zip(live, blocks):
        out[s] = acc[lo:lo + b.size], loss[lo:lo + b.size]
        lo += b.size
    return out
