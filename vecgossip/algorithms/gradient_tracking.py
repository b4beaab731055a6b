"""Gradient tracking, DSGT (Pu & Nedic, "Distributed stochastic gradient tracking methods", Math.
Programming 2021): besides its model x_i, node i keeps y_i, which tracks the average gradient, and
the gradient it last took, g_i. With y^0 = g(x^0):

    adapt_then_combine (Pu & Nedic):    x^{k+1} = W (x^k - lr y^k)
    combine_then_adapt (epfml/quasi-global-momentum's decentralized_sgd_with_gradient_tracking.py):
                                        x^{k+1} = W x^k - lr y^k
    y^{k+1} = W y^k + g(x^{k+1}) - g(x^k)

each g on that step's own minibatch, weight decay added to it (g = grad F_i + wd x_i). With local
momentum mu (optim.momentum) the tracked direction is smoothed first, v <- mu v + y, and x moves
by lr v (as the epfml code applies momentum after aggregating y).

Round t runs the two halves: the local part takes g(x^t) on a fresh minibatch and completes
y^t = (W y^{t-1}) + g(x^t) - g(x^{t-1}) (zero state makes y^0 = g(x^0)); the communication moves
x and mixes y (both with the round's W_t: under faults one realization carries both). Invariant
(W doubly stochastic, every client participating): mean_i y_i = mean_i g_i after every round.
One gradient per round: engine.local_steps must be 1 (local steps with tracking, e.g. K-GT, are
another algorithm). Bytes per client: its messages x 2 models (x and y)."""
from __future__ import annotations

from dataclasses import dataclass

from vecgossip.algorithms.base import Requires, PerNode, RoundAlgorithm

FORMS = ("adapt_then_combine", "combine_then_adapt")


@dataclass(frozen=True)
class Params:
    form: str = "adapt_then_combine"

    def __post_init__(self) -> None:
        if self.form not in FORMS:
            raise ValueError(f"form={self.form!r} is unknown; allowed: {', '.join(FORMS)}")


class GradientTracking(RoundAlgorithm):
    Params = Params

    def state(self, layout):
        return {"y": PerNode(("P",)), "g": PerNode(("P",))}

    requires = Requires(local_steps=1, gossip_steps=1, why="one gradient and one mixing per round")

    def local_train(self, ctx, clients, lr):
        y, g_prev, p, wd = ctx.state.extra["y"], ctx.state.extra["g"], ctx.layout.params_size, ctx.opt.weight_decay

        def step(theta, momentum, x, labels, weight, lr, rows):    # theta itself does not move here
            loss, g = ctx.loss_and_grad(theta, x, labels, weight)
            g[:, :p] += wd * theta[:, :p]
            y[rows] += g - g_prev[rows]
            g_prev[rows] = g
            return loss
        return ctx.local_sgd(clients, lr, step=step)

    def communicate(self, ctx, t, clients):
        x, y, v = ctx.state.theta, ctx.state.extra["y"], ctx.state.momentum
        lr, mu = ctx.opt.lr_at(t), ctx.opt.momentum
        direction = v.mul_(mu).add_(y) if mu else y
        if self.params.form == "adapt_then_combine":
            x.copy_(ctx.mix(x - lr * direction, t))
        else:
            x.copy_(ctx.mix(x, t) - lr * direction)
        y.copy_(ctx.mix(y, t))
        return ctx.messages(t) * 2 * ctx.model_bytes
