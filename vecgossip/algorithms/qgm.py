"""QG-DSGDm, quasi-global momentum (Lin, Karimireddy, Stich, Jaggi, ICML 2021, Algorithm 1): local
momentum built from the model's progress across a whole round (gossip included) instead of the
local gradient alone, which heterogeneous data bias. Round t, node i (m_hat_i = 0 at the start):

    g_i = grad F_i(x_i; xi) + wd x_i
    m_i = beta m_hat_i + g_i                         (beta: optim.momentum)
    x_i' = x_i - lr_t m_i
    x_i_new = sum_j w_ij x_j'                        (one gossip step)
    d_i = (x_i - x_i_new) / lr_t
    m_hat_i <- mu m_hat_i + (1 - mu) d_i             (mu: algorithm.mu; the authors' code uses
                                                      1 - mu = 0.1, its ``factor``)

as in epfml/quasi-global-momentum (code/pcode/optim/decentralized_qg_sgd.py) with ``local_step`` =
1 and no Nesterov. One local step per round (engine.local_steps=1), as the paper's D-PSGD base.
Bytes per client: its messages x one model. DSGDm (heavy-ball momentum on the local gradient) is
method=dpsgd with optim.momentum=0.9 (preset dsgdm)."""
from __future__ import annotations

from dataclasses import dataclass

from vecgossip.algorithms.base import Requires, PerNode, RoundAlgorithm


@dataclass(frozen=True)
class Params:
    mu: float = 0.9            # the quasi-global buffer's decay

    def __post_init__(self) -> None:
        if not 0.0 <= self.mu < 1.0:
            raise ValueError(f"mu must be in [0, 1), got {self.mu}")


class QGDSGDm(RoundAlgorithm):
    Params = Params

    def state(self, layout):
        return {"m_hat": PerNode(("params",)), "x_prev": PerNode(("P",))}

    requires = Requires(local_steps=1, gossip_steps=1, why="one local step and one gossip step per round")

    def local_train(self, ctx, clients, lr):
        m_hat, p = ctx.state.extra["m_hat"], ctx.layout.params_size
        ctx.state.extra["x_prev"].copy_(ctx.state.theta)
        beta, wd = ctx.opt.momentum, ctx.opt.weight_decay

        def step(theta, momentum, x, y, weight, lr, rows):
            loss, g = ctx.loss_and_grad(theta, x, y, weight)
            w = theta[:, :p]
            w.sub_(lr * (beta * m_hat[rows] + g[:, :p] + wd * w))
            return loss
        return ctx.local_sgd(clients, lr, step=step)

    def communicate(self, ctx, t, clients):
        sent = ctx.gossip(t, clients)
        lr, mu, p = ctx.opt.lr_at(t), self.params.mu, ctx.layout.params_size
        d = (ctx.state.extra["x_prev"][:, :p] - ctx.state.theta[:, :p]) / lr
        ctx.state.extra["m_hat"].mul_(mu).add_(d, alpha=1 - mu)
        return sent
