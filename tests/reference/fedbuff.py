"""FedBuff (Nguyen et al. 2022, Algorithm 1) event by event, client by client: a plain heap of
(time, sequence) events on links without a bandwidth limit (a download arrives ``latency`` after
its dispatch, an upload ``latency`` after its client's compute ends), the same draws of who is
dispatched (``default_rng([seed, 7, 5])``, the rule of vecgossip/engines/clock/dispatch.py
restated here), plain modules with torch.optim.SGD for the local steps, and the server's buffered,
staleness-weighted step written out as a loop over the arrivals."""
from __future__ import annotations

import heapq
import itertools

import numpy as np
import torch
import torch.nn.functional as F

from vecgossip.core.state import flatten, load_flat
from vecgossip.models import build as build_model


def run(cfg, engine, sampler, init: torch.Tensor, step_seconds: np.ndarray, rounds: int):
    """(the server's model after ``rounds`` steps, the time of each step, each step's arrivals)."""
    p, o, lat = cfg.algorithm, cfg.optim, float(cfg.clock.links.latency)
    m = engine.m
    steps = [cfg.engine.local_steps] * m
    compute = [steps[i] * float(step_seconds[i]) for i in range(m)]
    rng = np.random.default_rng([cfg.seed, 7, 5])
    server = init[0].clone()
    deltas = {}                                             # each client's Delta of its last work
    version, blocked, pending = [-1] * m, [False] * m, []
    events, seq = [], itertools.count()
    v = 0

    def fill(now):
        free = p.concurrency - sum(x >= 0 for x in version)
        eligible = np.array([i for i in range(m) if version[i] < 0 and not blocked[i]], dtype=np.int64)
        if free <= 0 or not eligible.size:
            return
        for i in sorted(rng.choice(eligible, min(free, eligible.size), replace=False).tolist()):
            version[i], blocked[i] = v, True
            pending.append(i)
            heapq.heappush(events, (now + lat, next(seq), "downloaded", i))

    fill(0.0)
    times, log = [], []
    for t in range(rounds):
        arrived = []
        while len(arrived) < p.buffer:
            now, _, kind, i = heapq.heappop(events)
            if kind == "downloaded":
                heapq.heappush(events, (now + compute[i] + lat, next(seq), "arrived", i))
                continue
            arrived.append((i, version[i]))
            version[i] = -1
            if len(arrived) < p.buffer:
                fill(now)
        trains = sorted(pending)
        pending.clear()
        v += 1
        blocked = [x >= 0 for x in version]
        fill(now)
        times.append(now)
        log.append(arrived)
        # the clients dispatched at version t train from the server's model, client by client
        lr = o.lr * o.lr_decay ** t
        nets = {}
        for i in trains:
            nets[i] = build_model(cfg.model.name, engine.train_data.shape, engine.train_data.num_classes).to(init.dtype)
            load_flat(nets[i], engine.layout, server)
        opts = {i: torch.optim.SGD(nets[i].parameters(), lr=lr, weight_decay=o.weight_decay) for i in trains}
        for s in range(max((steps[i] for i in trains), default=0)):
            act = [i for i in trains if steps[i] > s]
            batch = sampler.next(torch.tensor(act))
            for j, i in enumerate(act):
                x, y, w = batch.materialise(engine.train_data, j, j + 1)
                keep = w[0] > 0
                opts[i].zero_grad()
                F.cross_entropy(nets[i](x[0][keep]), y[0][keep]).backward()
                opts[i].step()
        for i in trains:
            deltas[i] = flatten(nets[i]) - server
        step = torch.zeros_like(server)
        for i, vi in arrived:
            s_tau = 1.0 / np.sqrt(1.0 + (t - vi)) if p.staleness == "sqrt" else 1.0
            step += s_tau / p.buffer * deltas[i]
        server = server + p.server_lr * step
    return server, times, log
