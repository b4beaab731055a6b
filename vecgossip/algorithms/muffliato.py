"""Muffliato (Cyffers, Even, Bellet and Massoulié, NeurIPS 2022, "Muffliato: Peer-to-Peer Privacy
Amplification for Decentralized Optimization and Averaging"), Algorithm 1 (Muffliato-SGD) on the
round engine: every round each client takes ONE private local step, in which noise is added once
(DP-SGD: per-sample clipping to privacy.clip, Gaussian noise privacy.noise_multiplier x clip,
vecgossip/privacy/), then K = engine.gossip_steps gossip steps spread it:

    y_i = x_i - lr_t (g~_i + wd x_i);        x <- W^K y               (plain gossip)
    x <- P_K(W) y  with Chebyshev's semi-iterative recurrence           (``chebyshev=true``)
        z_0 = y,  z_1 = W z_0,  z_{k+1} = w_{k+1} (W z_k - z_{k-1}) + z_{k-1},
        w_2 = 2 / (2 - l^2),  w_{k+1} = 1 / (1 - l^2 w_k / 4),   l = |lambda_2(W)|

(the paper's accelerated gossip, section 4: the same average, the disagreement shrinking like
((1 - sqrt(1 - l^2)) / l)^k instead of l^k). The noise once, the gossip many times is what
amplifies privacy between non-neighbours: summary.json's privacy.network reports the paper's
pairwise network DP (Theorem 1, composed over rounds; vecgossip/privacy/network.py) beside the
local DP of the same noise, for plain gossip on a static graph."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from vecgossip.algorithms.base import Requires, RoundAlgorithm
from vecgossip.network.mixing import spectral_gap


@dataclass(frozen=True)
class Params:
    chebyshev: bool = False          # Chebyshev-accelerated gossip (needs |lambda_2| of W: measured, or lambda2)
    lambda2: float | None = None     # |lambda_2(W)| for the acceleration (null: computed from the round's W)

    def __post_init__(self) -> None:
        if self.lambda2 is not None and not 0 <= self.lambda2 < 1:
            raise ValueError(f"lambda2 must be in [0, 1), got {self.lambda2}")


def chebyshev_weights(lam: float, steps: int) -> list[float]:
    """w_1 .. w_K of the semi-iterative recurrence (w_1 = 1: z_1 = W z_0)."""
    out = [1.0]
    for k in range(1, steps):
        out.append(2.0 / (2.0 - lam ** 2) if k == 1 else 1.0 / (1.0 - lam ** 2 * out[-1] / 4.0))
    return out


class Muffliato(RoundAlgorithm):
    Params = Params
    requires = Requires(local_steps=1, why="one private local step (noise once) per round, then the gossip")

    @property
    def gossips_linearly(self) -> bool:
        """x <- W^K y: what privacy/network.py's bound assumes."""
        return not self.params.chebyshev

    def communicate(self, ctx, t, clients):
        if not self.params.chebyshev:
            return ctx.gossip(t, clients)
        q = ctx.gossip_steps
        lam = self.params.lambda2 if self.params.lambda2 is not None else self.measured_lambda(ctx, t)
        prev, cur = ctx.state.theta, ctx.mix(ctx.state.theta, t, 0)
        sent = ctx.messages(t, 0)
        for k, w in enumerate(chebyshev_weights(lam, q)[1:], start=1):
            prev, cur = cur, w * (ctx.mix(cur, t, k) - prev) + prev
            sent += ctx.messages(t, k)
        ctx.state.theta.copy_(cur)
        return sent * ctx.model_bytes

    def measured_lambda(self, ctx, t: int) -> float:
        """|lambda_2| of the round's W, rebuilt from the neighbourhoods service (every client's
        rows: one process)."""
        nb = ctx.neighbourhoods(t)
        if len(ctx.node_ids) != ctx.m:
            raise ValueError("muffliato: chebyshev=true on a sharded run needs lambda2 given")
        key = (nb.index.cpu().numpy().tobytes(), nb.weight.cpu().numpy().tobytes())
        if getattr(self, "_lam_key", None) != key:
            idx, w, mask = nb.index.cpu().numpy(), nb.weight.cpu().double().numpy(), nb.mask.cpu().numpy()
            rows = np.repeat(np.arange(ctx.m), idx.shape[1])[mask.ravel()]
            mat = sp.csr_matrix((w.ravel()[mask.ravel()], (rows, idx.ravel()[mask.ravel()])), shape=(ctx.m, ctx.m))
            mat = mat + sp.diags(nb.self_weight.cpu().double().numpy())
            self._lam_key, self._lam = key, 1.0 - spectral_gap(mat.tocsr())
        return self._lam
