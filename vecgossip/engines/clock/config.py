"""The ``clock`` group (issue 48): virtual seconds. Off by default; on, the round engine times every
round (:mod:`.rounds`) and the tick engine runs gossip learning in windows of ``resolution``
seconds (:mod:`vecgossip.engines.tick.timed`), from each node's compute (:mod:`.compute`), its
links (:mod:`.links`) and the sharing policy of concurrent transfers (:mod:`.transfers`), drawn
once from the run's seed."""
from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from vecgossip.core.options import Options
from vecgossip.engines.clock.churn import Churn, ChurnConfig
from vecgossip.engines.clock.compute import ComputeConfig, pick_devices, step_seconds, trace_bandwidth
from vecgossip.engines.clock.links import LinksConfig, bandwidth, latency_matrix, server_links

STREAM = 7          # the clock's numpy stream: default_rng([seed, STREAM]) (no other part draws from it)


class ClockConfig(Options):
    """Virtual seconds: off, or the round engine's barrier rounds timed."""

    enabled: bool = False                 # time every round in virtual seconds (round engine)
    compute: ComputeConfig = ComputeConfig()   # seconds per local step, per node
    links: LinksConfig = LinksConfig()    # uplink / downlink Mbit/s per node, latency per pair
    policy: Literal["fair", "fifo", "greedy"] = "fair"   # concurrent transfers: max-min fair share | one at a time
                                          # per uplink | sacs-epfl's simulator's first-come allocation
    barrier: Literal["global", "node"] = "global"   # round engine: everyone waits for the slowest | each node for its in-neighbours
    churn: ChurnConfig = ChurnConfig()    # who is online when (read at each round's start)
    resolution: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0   # tick engine: seconds a tick (one wave)


def timer(cfg: ClockConfig, n: int, batch: int, seed: int, server: bool = False):
    """The run's :class:`~.rounds.RoundTimer` (``barrier=node``: :class:`~.barrier.NodeBarrier`): speeds from ``default_rng([seed, STREAM, 0])``
    (a FedScale device trace: each node's device drawn there gives its step time and, when
    ``links.uplink`` is not set, its link's bytes a second in both directions, from ``communication`` kbps),
    bandwidths from ``default_rng([seed, STREAM, 1])`` (separate streams: a sweep over the compute
    model keeps each node's links, and the reverse), the same for every process and on resume.
    ``server``: a server algorithm's run: the server's links (:func:`~.links.server_links`) and the
    asynchronous server's draws (``default_rng([seed, STREAM, 5])``)."""
    from vecgossip.engines.clock import traces
    from vecgossip.engines.clock.rounds import RoundTimer
    rng, links = np.random.default_rng([seed, STREAM, 0]), np.random.default_rng([seed, STREAM, 1])
    devices = ids = None
    if cfg.compute.model == "trace":
        devices = traces.read(cfg.compute.trace)
        traces.check_capacity(devices, cfg.compute.trace)
        ids = pick_devices(devices, n, rng)
    secs = step_seconds(cfg.compute, n, batch, rng, devices, ids)
    up = bandwidth(cfg.links.uplink, n, links)
    if devices is not None and cfg.links.uplink is None:     # the trace's communication (kbps) sets the links
        up = trace_bandwidth(devices, ids)
    down = up if cfg.links.downlink is None else bandwidth(cfg.links.downlink, n, links)
    behaviour = None
    if cfg.churn.model == "trace":
        behaviour = traces.read(cfg.churn.trace)
        traces.check_behaviour(behaviour, cfg.churn.trace)
    churn = None if cfg.churn.model == "none" else Churn(cfg.churn, n, seed, STREAM, behaviour)
    if cfg.barrier == "node":
        from vecgossip.engines.clock.barrier import NodeBarrier
        return NodeBarrier(secs, up, down, latency_matrix(cfg.links.latency, n), cfg.policy, churn)
    tm = RoundTimer(secs, up, down, latency_matrix(cfg.links.latency, n), cfg.policy, churn)
    if server:
        tm.server, tm.dispatch_rng = server_links(cfg.links), np.random.default_rng([seed, STREAM, 5])
    return tm


def seconds(cfg: ClockConfig, n: int, batch: int, seed: int):
    """The tick engine's :class:`~vecgossip.engines.tick.timed.windows.Seconds`: the same draws as
    :func:`timer` (a node's speed and links do not depend on the engine)."""
    from vecgossip.engines.tick.timed.windows import Seconds
    tm = timer(cfg, n, batch, seed)
    return Seconds(tm.step_seconds, tm.uplink, tm.downlink, tm.latency, cfg.policy, cfg.resolution, tm.churn)
