"""Gossip learning in virtual seconds, node by node (issue 48's twin of engines/tick/timed/):
node i's k-th step completes at k x c_i; its fresh model (a flat copy, the snapshot) goes to
every neighbour as one message, in (time, sender, receiver) order; the messages' delivery times
come from the per-event transfer twin (reference.clock.simulate: water-filling written with loops,
nothing shared with vecgossip.engines.clock); then, window by window of ``resolution`` seconds:
the due nodes train (plain nn.Modules, Caffe SGD), the window's deliveries go into the buffers
(Python lists) in delivery order, and full buffers merge by Eq. 1 (+ Algorithm 3)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

import reference.clock
from reference.gossip import caffe_step, merge
from vecgossip.core.state import Layout, flatten, load_flat
from vecgossip.data.sampling import sample_node_batches
from vecgossip.models import get_model


def window(seconds: float, resolution: float) -> int:
    return math.floor(seconds / resolution + 1e-9)


def deliveries(nbrs, step_seconds, up, down, latency, size, policy, resolution, windows):
    """The messages of every step that completes before the last window ends and their deliveries:
    ([(sender, its step, receiver)] by message index, [(delivery time, message index)] in order)."""
    sends = []
    for i, c in enumerate(step_seconds):
        k = 0
        while window(k * c, resolution) < windows:
            sends.append((k * c, i, k))
            k += 1
    sends.sort()
    starts, msgs = [], []
    for time, i, k in sends:
        for r in nbrs[i]:
            starts.append({"time": time, "sender": i, "receiver": r, "size": size, "latency": latency[i][r],
                           "tag": len(starts)})
            msgs.append((i, k, r))
    return msgs, reference.clock.simulate(starts, up, down, policy)


def run(init, graph, data, probs, cfg, R: int, seed: int, windows: int, step_seconds, up, down, latency,
        size: float, policy: str, resolution: float):
    """Reference: returns (models (N, P), steps per node, staleness sum per receiver)."""
    n = graph.n
    model = get_model("mlp")
    layout = Layout.of(model.factory())
    nets = []
    for i in range(n):
        net = model.factory().to(init.dtype)
        load_flat(net, layout, init[i])
        nets.append(net)
    vel = [{k: torch.zeros_like(p) for k, p in net.named_parameters()} for net in nets]
    iters = [0] * n
    nbrs = [sorted(graph.to_networkx().neighbors(i)) for i in range(n)]
    msgs, order = deliveries(nbrs, step_seconds, up, down, latency, size, policy, resolution, windows)
    by_window: dict[int, list[int]] = {}
    arrival = {}
    for time, tag in order:
        by_window.setdefault(window(time, resolution), []).append(tag)
        arrival[tag] = time
    snapshots = {}
    buffers = [[] for _ in range(n)]
    stale = [0.0] * n
    gen = torch.Generator().manual_seed(seed)
    for w in range(windows):
        due = [i for i in range(n) if window(iters[i] * step_seconds[i], resolution) == w]
        if due:
            x, y = sample_node_batches(data, None if probs is None else probs[due], len(due), cfg.batch_size, gen)
            for j, i in enumerate(due):                            # 1. train
                net = nets[i]
                net.zero_grad()
                F.cross_entropy(net(x[j]), y[j]).backward()
                caffe_step(net, vel[i], iters[i])
                snapshots[(i, iters[i])] = flatten(net).clone()
                iters[i] += 1
        for tag in by_window.get(w, []):                           # 2. deliveries, in order
            i, k, r = msgs[tag]
            buffers[r].append(snapshots[(i, k)])
            stale[r] += arrival[tag] - k * step_seconds[i]
        for i in range(n):                                         # 3. merge full buffers
            if buffers[i] and len(buffers[i]) >= R * len(nbrs[i]):
                merge(nets[i], buffers[i], cfg, layout)
                buffers[i] = []
    return torch.stack([flatten(net) for net in nets]), iters, stale
