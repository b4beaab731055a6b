"""SWIFT in virtual seconds, message by message (issue 48's twin of algorithms/swift.py and the cache
path of engines/tick/timed/): node i's k-th step ends at k x c_i; window by window of
``resolution`` seconds, each due node (node order) averages with its caches, x_i <- W_ii x_i +
sum_j W_ij c_ij (W: Metropolis-Hastings from the graph's degrees, written here with loops; a
neighbour not heard from yet counts as x_i), takes its gradient at that model (plain nn.Module;
batches replayed from a second engine's draws) and a Caffe SGD step (flat vectors), then sends
its model to each neighbour (ascending): one message of the model's bytes, delivery times from
the transfers' loop twin (reference.clock, all sends so far); a message delivered in the window
replaces the receiver's cached model of its sender if it was sent later than the cached one."""
from __future__ import annotations

import math

import numpy as np
import torch

import reference.clock
from reference import flat_sgd


def window(seconds: float, resolution: float) -> int:
    return math.floor(seconds / resolution + 1e-9)


def run(engine, ref, nbrs, step_seconds, up, down, latency, size, resolution: float, windows: int, policy: str):
    """Returns (models, steps per node, messages received per node)."""
    n = engine.n
    deg = [len(nb) for nb in nbrs]
    w = {(i, j): 1.0 / (max(deg[i], deg[j]) + 1.0) for i in range(n) for j in nbrs[i]}
    nodes = flat_sgd.FlatNodes(engine)
    xs, iters = nodes.xs, nodes.iters
    cache: dict[tuple[int, int], tuple[float, torch.Tensor]] = {}     # (receiver, sender) -> (sent at, model)
    steps, got = [0] * n, [0] * n
    starts: list[dict] = []
    payload: list[tuple] = []
    for t in range(windows):
        due = [i for i in range(n) if window(steps[i] * step_seconds[i], resolution) == t]
        if due:
            _, images, _ = ref.draw(np.array(due))
            for r, i in enumerate(due):
                mixed = xs[i] * (1.0 - sum(w[i, j] for j in nbrs[i]))
                for j in nbrs[i]:
                    mixed = mixed + w[i, j] * (cache[i, j][1] if (i, j) in cache else xs[i])
                xs[i] = mixed
                nodes.step(i, images[r:r + 1])
                sent_at = steps[i] * step_seconds[i]
                for d in sorted(nbrs[i]):
                    starts.append({"time": sent_at, "sender": i, "receiver": d, "size": size,
                                   "latency": latency[i][d], "tag": len(starts)})
                    payload.append((sent_at, xs[i].clone()))
                steps[i] += 1
        for time, tag in reference.clock.simulate(starts, up, down, policy):
            if window(time, resolution) == t:
                s, d = starts[tag]["sender"], starts[tag]["receiver"]
                got[d] += 1
                if (d, s) not in cache or cache[d, s][0] < payload[tag][0]:
                    cache[d, s] = payload[tag]
    return torch.stack(xs), iters, got
