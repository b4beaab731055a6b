"""Step 3 of the round engine: the metrics of an evaluation round (paper 2's tables): every
client's accuracy on its local test set, its accuracy on a shared global subset, the accuracy of
the average model x_bar on the whole test set, losses, and the consensus distance."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from vecgossip.core.metrics import consensus_distance, evaluate, evaluate_indexed, evaluate_ragged, per_image
from vecgossip.data.dataset import Dataset
from vecgossip.runtime.shard import split

Tensor = torch.Tensor


@dataclass
class EvalSets:
    """Local test sets ``local`` (m, S) and the shared global subset ``shared`` (G,) for the
    per-client global accuracy, as indices into ``test``; x_bar is evaluated on the full test set."""

    test: Dataset
    local: Tensor
    shared: Tensor
    sizes: np.ndarray | None = None   # text: (m,) real windows per row of ``local`` (the rest padding)


class RoundMeasures:
    """One metrics row. ``server``: every client holds the server's model (one pass serves all
    metrics); ``eval_images``: at most this many images per forward (big models)."""

    def __init__(self, state, shard, forward, evals: EvalSets, chunk: int, eval_images: int | None,
                 server: bool) -> None:
        self.state, self.shard, self.forward, self.evals, self.chunk = state, shard, forward, evals, chunk
        self.eval_images, self.server = eval_images, server
        self.layout, self.device = state.layout, state.theta.device

    def measure(self, t: int, lr: float, train_loss: float, left_out: Tensor,
                global_model: Tensor | None, failed: Tensor | None = None) -> tuple[dict, np.ndarray]:
        """The row's accuracies, losses and consensus distance (the engine adds its counters), and
        every client's local accuracy (NaN for the clients ``left_out``: isolated or Byzantine).
        ``failed`` (m,): the diverged clients among them, whose accuracy counts as 0 in acc_mean and
        acc_min (a run where clients diverged never looks healthy; Byzantine ones stay out)."""
        theta, sh = self.state.theta, self.shard
        alive = ~left_out
        every = sh.gather_rows(theta, sh.sizes, models=False)          # all clients' models (sharded: gathered)
        live = every if bool(alive.all()) else every[alive]       # isolated / Byzantine: left out of x_bar
        xbar = live.mean(0, keepdim=True) if global_model is None else global_model   # (1, P)
        right, img_loss = self.every_image(xbar)                                          # (E,) each
        local, local_loss, shared = (self.from_server(right, img_loss) if self.server else self.per_client())
        acc, ok = local.cpu().numpy(), alive.cpu().numpy()
        acc[~ok] = np.nan                               # isolated clients: NaN in accuracy.npy
        a = acc[ok]
        lost = None if failed is None else failed.cpu().numpy()    # one read of the diverged clients
        if lost is not None and lost.any():
            a = np.concatenate([a, np.zeros(int(lost.sum()))])
        row = {"round": t, "lr": lr, "acc_mean": float(a.mean()) if a.size else np.nan,
               "acc_min": float(a.min()) if a.size else np.nan, "acc_max": float(acc[ok].max()) if ok.any() else np.nan,
               "global_acc_mean": float(shared[alive].mean()), "xbar_acc": float(right.float().mean()),
               "test_loss_mean": float(local_loss[alive].mean()), "train_loss_mean": train_loss,
               "consensus_distance": consensus_distance(live[:, :self.layout.params_size])}
        if self.evals.sizes is not None:          # text: accuracy over every counted client's test windows
            w = self.evals.sizes * ok
            if lost is not None:
                w = w + self.evals.sizes * lost
            row["acc_chars"] = float(np.nansum(np.where(ok, acc, 0.0) * w) / max(1, w.sum()))
        return row, acc

    def every_image(self, model: Tensor) -> tuple[Tensor, Tensor]:
        """One model (1, P) on the whole test set: (E,) right-or-not and (E,) loss per image, in
        batches of up to 2000 images. Sharded, each rank runs whole batches (the first ranks one
        more when they do not divide evenly) and every rank gets all the images' results: the
        same batches as one process, so the same bits, at 1/world of the forward work."""
        ev, sh = self.evals, self.shard
        n, batch = ev.test.labels.numel(), min(2000, self.eval_images or 2000)
        if not sh.sharded:
            return per_image(self.forward, self.layout, model, ev.test, torch.arange(n, device=self.device), batch)
        bounds = np.minimum(split(-(-n // batch), sh.world) * batch, n)        # whole batches per rank
        lo, hi = int(bounds[sh.rank]), int(bounds[sh.rank + 1])
        mine = torch.arange(lo, hi, device=self.device)
        if hi > lo:
            right, loss = per_image(self.forward, self.layout, model, ev.test, mine, batch)
        else:
            right, loss = torch.zeros(0, dtype=torch.bool, device=self.device), model.new_zeros(0)
        counts = np.diff(bounds)
        return sh.gather_rows(right.to(torch.uint8), counts, models=False).bool(), \
            sh.gather_rows(loss, counts, models=False)

    def from_server(self, right: Tensor, img_loss: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        ev = self.evals
        shared = right[ev.shared].float().mean().expand(self.shard.n)
        if ev.sizes is None:
            return right[ev.local].float().mean(1), img_loss[ev.local].mean(1), shared
        sizes = torch.as_tensor(ev.sizes, device=right.device)
        real = (torch.arange(ev.local.shape[1], device=right.device) < sizes[:, None]).float()
        count = sizes.clamp_min(1)
        return ((right[ev.local].float() * real).sum(1) / count, (img_loss[ev.local] * real).sum(1) / count,
                shared)

    def per_client(self) -> tuple[Tensor, Tensor, Tensor]:
        """Each client's local accuracy and loss, and its accuracy on the shared subset."""
        theta, ev, sh, chunk = self.state.theta, self.evals, self.shard, self.chunk
        if ev.sizes is None:
            local, local_loss = evaluate_indexed(self.forward, self.layout, theta, ev.test, ev.local[sh.lo:sh.hi],
                                                 chunk, self.eval_images)
        else:
            local, local_loss = evaluate_ragged(self.forward, self.layout, theta, ev.test, ev.local[sh.lo:sh.hi],
                                                ev.sizes[sh.lo:sh.hi], chunk, self.eval_images)
        # the chunk was sized for S local images per client: keep chunk x images the same here
        per = max(1, chunk * ev.local.shape[1] // ev.shared.numel())
        shared, _ = evaluate(self.forward, self.layout, theta, *ev.test.batch(ev.shared), per, self.eval_images)
        return sh.cat_nodes(local), sh.cat_nodes(local_loss), sh.cat_nodes(shared)
