"""Push gossip in virtual seconds, message by message: the twin of algorithms/staleness_gossip.py
and algorithms/el_async.py (issue 55) on the timed messages of engines/tick/timed/. Node i's k-th
step ends at k x c_i; window by window of ``resolution`` seconds, each due node (node order)
merges the models that arrived since its last step, each weighted by ``weigh(arrival - send)``,
x <- (x + sum w_r x_r) / (1 + sum w_r) (nothing arrived: x stays), takes its gradient there (plain
nn.Module; batches replayed from a second engine's draws) and a Caffe SGD step; then the due
nodes send their fresh models to ``recipients(rng, due)`` (one list per due node, drawn from the
algorithm's numpy stream), one message each in (sender, recipient) order; delivery times from the
transfers' loop twin (reference.clock); a delivery in the window goes into the receiver's list."""
from __future__ import annotations

import math

import numpy as np
import torch

import reference.clock
from reference import flat_sgd
from vecgossip.algorithms import Streams


def window(seconds: float, resolution: float) -> int:
    return math.floor(seconds / resolution + 1e-9)


def run(engine, ref, recipients, weigh, step_seconds, up, down, latency, size, resolution: float, windows: int,
        policy: str, seed: int = 0):
    """Returns (models, steps per node, messages received per node)."""
    n = engine.n
    nodes = flat_sgd.FlatNodes(engine)
    xs, iters = nodes.xs, nodes.iters
    inbox: list[list[tuple[float, torch.Tensor]]] = [[] for _ in range(n)]
    steps, got = [0] * n, [0] * n
    rng = Streams.of(seed).numpy
    starts: list[dict] = []
    payload: list[tuple] = []
    for t in range(windows):
        due = [i for i in range(n) if window(steps[i] * step_seconds[i], resolution) == t]
        if due:
            _, images, _ = ref.draw(np.array(due))
            for r, i in enumerate(due):
                if inbox[i]:
                    total, x = 1.0, xs[i]
                    for w, m in inbox[i]:
                        x = x + w * m
                        total += w
                    xs[i] = x / total
                    inbox[i] = []
                nodes.step(i, images[r:r + 1])
            for i, to in zip(due, recipients(rng, due)):
                for d in to:
                    starts.append({"time": steps[i] * step_seconds[i], "sender": i, "receiver": d, "size": size,
                                   "latency": latency[i][d], "tag": len(starts)})
                    payload.append((steps[i] * step_seconds[i], xs[i].clone(), d))
                steps[i] += 1
        for time, tag in reference.clock.simulate(starts, up, down, policy):
            if window(time, resolution) == t:
                sent, m, d = payload[tag]
                inbox[d].append((weigh(time - sent), m))
                got[d] += 1
    return torch.stack(xs), iters, got
