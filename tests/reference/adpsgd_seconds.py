"""AD-PSGD in virtual seconds, exchange by exchange (issue 48's twin of the exchange path of
engines/tick/timed/): node i's k-th step ends at k x c_i; window by window of ``resolution``
seconds, the due nodes (node order) take their gradients at the models they hold (plain
nn.Modules; batches replayed from a second engine's draws) and each starts an exchange with a
uniformly drawn neighbour (the algorithm's stream, node order): two messages of ``size`` bytes,
i -> j then j -> i, whose delivery times come from the transfers' loop twin (reference.clock:
simulated incrementally, every start known before any later event); an exchange completes when
its second message arrives; the window's completed exchanges, in (time, start order), average
their pairs one by one, then each initiator applies its gradient (Caffe SGD on flat vectors).

Churn (``churn.online(time)`` read at each window's start): an offline node's step slot passes;
an exchange with an offline peer is not started (the initiator's gradient applies alone); every
transfer from or to an offline node is dropped (the loop twin's abort event at the window's
start), which cuts its exchange: no average, the initiator's gradient applies alone if it is
online, else it is lost. In a window: first the cut exchanges' gradients (exchange order), then
the lone ones (node order), then the completed exchanges."""
from __future__ import annotations

import math

import numpy as np
import torch

import reference.clock
from reference import flat_sgd
from vecgossip.algorithms import Streams


def window(seconds: float, resolution: float) -> int:
    return math.floor(seconds / resolution + 1e-9)


def run(engine, ref, step_seconds, up, down, latency, size: float, resolution: float, windows: int,
        policy: str = "fair", seed: int = 0, churn=None):
    """``engine``: before it runs (its initial models and layout); ``ref``: a second engine of the
    same setting whose batch draws are replayed. Returns (models, gradient steps per node)."""
    layout, data, n = engine.layout, engine.train_data, engine.n
    o = engine.sgd
    xs = [engine.state.theta[i].clone() for i in range(n)]
    vs = [torch.zeros_like(xs[0]) for _ in range(n)]
    iters = [0] * n
    steps = [0] * n
    rng = Streams.of(seed).numpy
    peers = [np.flatnonzero(ref.a_full.toarray()[:, i]) for i in range(n)]
    bias = flat_sgd.bias_multiplier(layout, o, xs[0].dtype)
    net = flat_sgd.mlp(data, xs[0].dtype)
    starts: list[dict] = []              # every message started so far (and churn's aborts), in start order
    exchanges: list[dict] = []
    cut: set[int] = set()

    def step(i, g):
        xs[i], vs[i] = flat_sgd.caffe_update(xs[i], vs[i], g, iters[i], o, bias)
        iters[i] += 1

    for w in range(windows):
        online = [True] * n if churn is None else [bool(v) for v in churn.online(w * resolution)]
        if not all(online):
            starts.append({"time": w * resolution, "abort": {i for i in range(n) if not online[i]}})
        due = [i for i in range(n) if window(steps[i] * step_seconds[i], resolution) == w]
        for i in due:
            if not online[i]:                                               # the slot passes offline
                steps[i] += 1
        due = [i for i in due if online[i]]
        alone = []
        if due:
            _, images, _ = ref.draw(np.array(due))
            for r, i in enumerate(due):
                g = flat_sgd.gradient(net, layout, xs[i], data, images[r:r + 1])
                j = int(peers[i][rng.integers(peers[i].size)])
                steps[i] += 1
                if not online[j]:
                    alone.append((i, g))
                    continue
                t0 = (steps[i] - 1) * step_seconds[i]
                exchanges.append({"i": i, "j": j, "grad": g, "got": 0, "start": t0})
                for s, d in ((i, j), (j, i)):
                    starts.append({"time": t0, "sender": s, "receiver": d, "size": size, "latency": latency[s][d],
                                   "tag": len(starts), "exchange": len(exchanges) - 1})
        order = sorted(range(len(starts)), key=lambda k: (starts[k]["time"], k))
        dropped: list[int] = []
        delivered = reference.clock.simulate([starts[k] for k in order], up, down, policy, dropped)
        for e in sorted({starts[tag]["exchange"] for tag in dropped} - cut):   # cut now: the step alone, if online
            cut.add(e)
            if online[exchanges[e]["i"]]:
                step(exchanges[e]["i"], exchanges[e]["grad"])
        for i, g in alone:
            step(i, g)
        done = []
        for time, tag in delivered:
            if window(time, resolution) != w or starts[tag]["exchange"] in cut:
                continue
            ex = exchanges[starts[tag]["exchange"]]
            ex["got"] += 1
            if ex["got"] == 2:
                done.append((time, starts[tag]["exchange"]))
        done.sort()
        for _, e in done:                                                   # averages, in order
            i, j = exchanges[e]["i"], exchanges[e]["j"]
            xs[i] = xs[j] = (xs[i] + xs[j]) / 2
        for _, e in done:                                                   # then the gradients
            step(exchanges[e]["i"], exchanges[e]["grad"])
    return torch.stack(xs), iters
