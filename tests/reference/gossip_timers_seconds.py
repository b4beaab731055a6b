"""Gossip learning with timers and age-weighted merges in virtual seconds, message by message
(issue 48's twin of algorithms/gossip_timers.py on the fragment path of engines/tick/timed/):
node i's k-th timer event at k x c_i; window by window of ``resolution`` seconds, each due node
(node order) merges the (model, age) pairs it received since its last event,
x <- (a x + sum a_r x_r) / (a + sum a_r), a <- max(a, max a_r) (nothing received: x stays), takes
its gradient there (plain nn.Module; batches replayed from a second engine's draws) and a Caffe
SGD step, a <- a + 1; then sends (x, a) to the neighbour at floor(u x degree) of its ascending
neighbour list (u from the algorithm's numpy stream, one per due node in node order); delivery
times from the transfers' loop twin (reference.clock); a delivery in the window adds a_r x_r and
a_r to the receiver's Python sums."""
from __future__ import annotations

import math

import numpy as np
import torch

import reference.clock
from reference import flat_sgd
from vecgossip.algorithms import Streams


def window(seconds: float, resolution: float) -> int:
    return math.floor(seconds / resolution + 1e-9)


def run(engine, ref, nbrs, step_seconds, up, down, latency, size, resolution: float, windows: int, policy: str,
        seed: int = 0):
    """Returns (models, ages, steps per node, messages received per node)."""
    n = engine.n
    nodes = flat_sgd.FlatNodes(engine)
    xs, iters = nodes.xs, nodes.iters
    inbox: list[list[tuple[float, torch.Tensor]]] = [[] for _ in range(n)]
    ages, steps, got = [0.0] * n, [0] * n, [0] * n
    rng = Streams.of(seed).numpy
    starts: list[dict] = []
    payload: list[tuple] = []
    for t in range(windows):
        due = [i for i in range(n) if window(steps[i] * step_seconds[i], resolution) == t]
        if due:
            _, images, _ = ref.draw(np.array(due))
            for r, i in enumerate(due):
                if inbox[i]:
                    total = ages[i] + sum(a for a, _ in inbox[i])
                    x = ages[i] * xs[i]
                    for a, m in inbox[i]:
                        x = x + a * m
                    xs[i] = x / total
                    ages[i] = max([ages[i]] + [a for a, _ in inbox[i]])
                    inbox[i] = []
                nodes.step(i, images[r:r + 1])
                ages[i] += 1
            u = rng.random(len(due))
            for r, i in enumerate(due):
                d = sorted(nbrs[i])[int(math.floor(u[r] * len(nbrs[i])))]
                starts.append({"time": steps[i] * step_seconds[i], "sender": i, "receiver": d, "size": size,
                               "latency": latency[i][d], "tag": len(starts)})
                payload.append((ages[i], xs[i].clone(), d))
                steps[i] += 1
        for time, tag in reference.clock.simulate(starts, up, down, policy):
            if window(time, resolution) == t:
                a, m, d = payload[tag]
                inbox[d].append((a, m))
                got[d] += 1
    return torch.stack(xs), ages, iters, got
