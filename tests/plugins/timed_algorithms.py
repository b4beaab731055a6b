"""A user's own algorithms, outside the package (issue 55's acceptance): written only on the
public interface (``vecgossip.algorithms``), run in virtual seconds, timed by the messages they
send. Loaded as ``algorithm._target_=timed_algorithms.<Class>`` with this folder on sys.path."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from vecgossip.algorithms import RoundAlgorithm, TickAlgorithm


@dataclass(frozen=True)
class SizedParams:
    quantized: int = 0          # clients 0 .. quantized - 1 send 8-bit messages (a quarter of a float32 model)
    quiet: bool = False         # nobody sends (a round of compute only)


class SizedGossip(RoundAlgorithm):
    """D-PSGD whose clients' messages have their own sizes: the first ``quantized`` send a model
    quantized to 8 bits (M / 4 bytes), the others the float32 model (M); ``quiet``: no one sends
    and the models stay (W = I). It reads the round's neighbourhoods and message count first
    (reads: no message)."""

    Params = SizedParams

    def communicate(self, ctx, t, clients):
        ctx.neighbourhoods(t)                           # read only
        ctx.messages(t)                                 # read only
        if self.params.quiet:
            return 0.0
        size = np.full(ctx.m, float(ctx.model_bytes))
        size[:self.params.quantized] = ctx.model_bytes / 4
        ctx.state.theta.copy_(ctx.mix(ctx.state.theta, t, bytes=size))
        return float(ctx.messages(t) * size.mean())


class LeaderBroadcast(RoundAlgorithm):
    """Client 0 sends its model to its neighbours, who average it in, x_i <- (x_i + x_0) / 2;
    nobody else sends. Who the neighbours are is read from the round's neighbourhoods."""

    def communicate(self, ctx, t, clients):
        senders, receivers, _ = ctx.neighbourhoods(t).edges()       # read only: no message
        hear = np.unique(receivers[senders == 0])
        w = sp.lil_matrix((ctx.m, ctx.m))
        w.setdiag(1.0)
        w[hear, hear] = 0.5
        w[hear, 0] = 0.5
        ctx.state.theta.copy_(ctx.mix(ctx.state.theta, t, w=w.tocsr()))
        return float(hear.size * ctx.model_bytes / ctx.m)


@dataclass(frozen=True)
class HalfParams:
    beta: float = 0.25          # the weight of a node's own model when it merges


class EagerGossip(TickAlgorithm):
    """Gossip learning with its own merge weight, composed from the tick engine's services: send
    the fresh model on every link, merge a full buffer by Eq. 1 with ``beta``."""

    Params = HalfParams

    def after_train(self, ctx, t, senders, online):
        ctx.send_models(senders, online, t)
        ctx.average(t, online, self.params.beta, False)


class MixingTick(TickAlgorithm):
    """A tick algorithm that averages instantly with ``ctx.mix``: untimed, refused in seconds."""

    def after_train(self, ctx, t, senders, online):
        ctx.state.theta.copy_(ctx.mix(ctx.state.theta, ctx.a_full * 0.0 + sp.identity(ctx.n)))
