"""The clock alone for the stragglers-with-DivShare's-links setting of make.sh (each seed's node
speeds, links and 6-regular graph, 30 rounds of 203,560-byte models, 1 ms latency), under both
barriers and both sharing policies: whether a per-node barrier's loss comes from the barrier or
from the fair sharing of overlapping rounds. No training: the models do not change the times.

    VECGOSSIP_DATA=../shared/data python results/time_rounds_cpu/barrier_policy.py > results/time_rounds_cpu/barrier_policy.md
"""
from __future__ import annotations

import os

import numpy as np
import scipy.sparse as sp

import vecgossip
from vecgossip.composition.rounds import build_engine
from vecgossip.config.load import load
from vecgossip.engines.clock.barrier import NodeBarrier
from vecgossip.engines.clock.rounds import RoundTimer

print("| seed | policy | global barrier, s | per-node barrier, s |")
print("|---|---|---|---|")
for seed in (0, 1, 2):
    cfg = vecgossip.compose(overrides=[
        "method=dpsgd", "model=mlp", "clients=60", "topology=regular", "degree=6", "rounds=30", "clock.enabled=true",
        "clock.compute.seconds=0.05", "clock.compute.model=stragglers", f"seed={seed}", "clock.links.latency=0.001",
        "clock.links.uplink=[{nodes:53,mbps:60},{nodes:7,mbps:[10,13]}]", f"data_root={os.environ['VECGOSSIP_DATA']}"])
    engine = build_engine(load(cfg, []).first)
    tm, edges, n = engine.timer, engine.mixing.graph.edges, 60
    a = np.eye(n)
    a[edges[:, 0], edges[:, 1]] = a[edges[:, 1], edges[:, 0]] = 1
    w = sp.csr_matrix(a)
    for policy in ("fair", "fifo"):
        ends = []
        for kind in (RoundTimer, NodeBarrier):
            clock = kind(tm.step_seconds, tm.uplink, tm.downlink, tm.latency, policy)
            for _ in range(30):
                clock.round(np.ones(n), w, 203_560.0)
                clock.end_round()
            clock.drain()
            ends.append(clock.seconds)
        print(f"| {seed} | {policy} | {ends[0]:.3f} | {ends[1]:.3f} |")
