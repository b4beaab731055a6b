"""Stochastic Gradient Push, SGP (Assran, Loizou, Ballas, Rabbat, ICML 2019, Algorithm 1): push-sum
gossip over a column-stochastic P^k, so directed and time-varying graphs work. Node i keeps the
numerator x_i and its push-sum weight w_i (w^0 = 1); its model is the de-biased z_i = x_i / w_i,
where gradients are taken and what is evaluated:

    x_i' = x_i - lr g_i(z_i)                 (g + wd z; local momentum v <- mu v + g, optim.momentum)
    x^{k+1} = P^k x';   w^{k+1} = P^k w      (P^k_ij = 1 / (out_j + 1): j splits its mass uniformly)
    z = x / w

The engine's parameters theta hold z; the declared state holds x and w. On a symmetric doubly
stochastic W (an undirected topology) w stays 1 and SGP is D-PSGD; on a digraph sum_i x_i and
sum_i w_i are kept by every mixing step (column sums 1), so mean x / mean w is conserved. Faults:
a lost message's share stays with its sender (W_ij moves to W_jj), which keeps both sums.
Bytes per client: its messages x (one model + one weight)."""
from __future__ import annotations

from vecgossip.algorithms.base import Requires, PerNode, RoundAlgorithm


class SGP(RoundAlgorithm):
    mixing = "column_stochastic"

    def state(self, layout):
        return {"x": PerNode(("P",), init="theta"), "w": PerNode((1,), init="ones")}

    requires = Requires(gossip_steps=1, why="one push-sum step per round")

    def local_train(self, ctx, clients, lr):
        num, w = ctx.state.extra["x"], ctx.state.extra["w"]
        p, mu, wd = ctx.layout.params_size, ctx.opt.momentum, ctx.opt.weight_decay

        def step(theta, momentum, x, y, weight, lr, rows):     # theta: the chunk's z = x / w
            loss, g = ctx.loss_and_grad(theta, x, y, weight)
            g[:, :p] += wd * theta[:, :p]
            v = momentum.mul_(mu).add_(g) if mu else g
            num[rows, :p] -= lr * v[:, :p]
            num[rows, p:] = theta[:, p:] * w[rows]              # BatchNorm statistics moved by the forward
            theta.copy_(num[rows] / w[rows])                    # the next local step starts from the new z
            return loss
        return ctx.local_sgd(clients, lr, step=step)

    def communicate(self, ctx, t, clients):
        num, w = ctx.state.extra["x"], ctx.state.extra["w"]
        num.copy_(ctx.mix(num, t))
        w.copy_(ctx.mix(w, t))
        ctx.state.theta.copy_(num / w)
        return ctx.messages(t) * (ctx.model_bytes + w.element_size())
