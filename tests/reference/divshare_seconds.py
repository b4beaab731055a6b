"""DivShare in virtual seconds, message by message (issue 48's twin of the fragment path of
engines/tick/timed/ and algorithms/divshare.py): node i's k-th step ends at k x c_i; window by
window of ``resolution`` seconds, each due node (node order) averages every parameter with the
fragment values it received (x + sum) / (1 + count), takes its gradient at that model (plain
nn.Module; batches replayed from a second engine's draws) and a Caffe SGD step (flat vectors);
then its model's fragments (the algorithm's draws, replayed from its streams: parameter ->
fragment ids, J recipients per fragment = the J smallest random keys among the other nodes) go
out as one message per (fragment, recipient) of the fragment's bytes, whose delivery times come
from the transfers' loop twin (reference.clock, simulated anew each window from every start so
far; with ``flush``, a node's waiting messages are dropped when it queues new ones); a message
delivered in the window adds its fragment, parameter by parameter, to its
receiver's Python sums and counts."""
from __future__ import annotations

import math

import numpy as np
import torch

import reference.clock
from reference import flat_sgd
from vecgossip.algorithms import Streams


def window(seconds: float, resolution: float) -> int:
    return math.floor(seconds / resolution + 1e-9)


def run(engine, ref, step_seconds, up, down, latency, resolution: float, windows: int, policy: str,
        fragments: int, peers: int, flush: bool, seed: int = 0):
    """``engine``: before it runs (its initial models and layout); ``ref``: a second engine of the
    same setting whose batch draws are replayed. Returns (models, steps per node, bytes sent per
    node, messages received per node, messages flushed)."""
    n = engine.n
    nodes = flat_sgd.FlatNodes(engine)
    xs, iters = nodes.xs, nodes.iters
    p = xs[0].numel()
    sums = [torch.zeros_like(xs[0]) for _ in range(n)]
    counts = [torch.zeros_like(xs[0]) for _ in range(n)]
    steps = [0] * n
    sent, got = [0.0] * n, [0] * n
    streams = Streams.of(seed)
    starts: list[dict] = []              # every message started so far, in start order
    payload: list[tuple] = []            # (values, mask, receiver) by message index
    for w in range(windows):
        due = [i for i in range(n) if window(steps[i] * step_seconds[i], resolution) == w]
        if due:
            _, images, _ = ref.draw(np.array(due))
            for r, i in enumerate(due):
                xs[i] = (xs[i] + sums[i]) / (1 + counts[i])
                sums[i], counts[i] = torch.zeros_like(xs[i]), torch.zeros_like(xs[i])
                nodes.step(i, images[r:r + 1])
            ids = torch.randint(fragments, (len(due), p), generator=streams.torch, dtype=torch.int8)
            keys = streams.numpy.random((len(due), fragments, n - 1))
            for r, i in enumerate(due):
                if flush:                            # before its new fragments: its waiting ones dropped
                    starts.append({"time": steps[i] * step_seconds[i], "flush": i})
                    payload.append(None)
                others = [k for k in range(n) if k != i]
                for f in range(fragments):
                    chosen = sorted(others[q] for q in sorted(range(n - 1), key=lambda q: keys[r, f, q])[:peers])
                    mask = ids[r] == f
                    for d in chosen:
                        size = int(mask.sum()) * xs[i].element_size()
                        starts.append({"time": steps[i] * step_seconds[i], "sender": i, "receiver": d,
                                       "size": size, "latency": latency[i][d], "tag": len(starts)})
                        payload.append((xs[i].clone(), mask, d))
                        sent[i] += size
                steps[i] += 1
        dropped: list[int] = []
        for time, tag in reference.clock.simulate(starts, up, down, policy, dropped):
            if window(time, resolution) == w:
                values, mask, d = payload[tag]
                sums[d] = sums[d] + torch.where(mask, values, torch.zeros_like(values))
                counts[d] = counts[d] + mask.to(values.dtype)
                got[d] += 1
    for tag in dropped:                              # never sent
        sent[starts[tag]["sender"]] -= starts[tag]["size"]
    return torch.stack(xs), iters, sent, got, len(dropped)
