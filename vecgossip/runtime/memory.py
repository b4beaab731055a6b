"""Will the run fit? An estimate made before anything is allocated, so that a run the device cannot
hold is refused at once, with the numbers, instead of failing (or swapping) hours later.

Estimate = nodes x parameters x 4 bytes (fp64: 8) x copies of the stacked state + the algorithm's
declared per-node state + the data set as uint8 + a fixed working space. Both engines hold 3 copies
(tick: parameters, momentum, buffer sums; rounds: parameters, momentum, gossip scratch); the working
space is 1 GiB on the tick clock and 1.3 GiB for rounds (the torch runtime, the clients' local test
sets, one chunk's gradients and activations). A run whose algorithm gathers (``Requires.gather``) or
that has Byzantine nodes (their messages are forged in the gather) adds the gather's workspace
(:func:`gather_workspace`: the results and the rule's blocks of messages); per-edge state (``PerEdge``) counts ``d_max`` copies per receiver, d_max
the topology's largest in-degree. Checked against the measured peaks of the scaling
study (results/scaling_cpu/) and of every built-in at small size (tests). Available = MemAvailable (Linux) on the CPU,
free memory on a CUDA device.
"""
from __future__ import annotations

import math

import torch
from vecgossip.data.registry import get_spec
from vecgossip.models import build as build_model, get_model
from vecgossip.core.state import Layout
from vecgossip.algorithms.base import PerEdge
from vecgossip.network.neighbourhoods import in_degree
from vecgossip.network.topology import build
import scipy.sparse as sp

COPIES = {"tick": 3, "rounds": 3}
BUDGET = 64 << 20      # bytes of messages one gather block holds at most (engines/gather.py)
MARGIN = {"tick": 1 << 30, "rounds": int(1.3 * (1 << 30))}


def declared_copies(algorithm, layout: Layout, d_max: int = 0) -> float:
    """The algorithm's declared per-node and per-edge state (algorithms.PerNode, PerEdge), in
    copies of the state; ``d_max``: the topology's largest in-degree (slots per receiver)."""
    sizes = [math.prod(s.size(layout, d_max) if isinstance(s, PerEdge) else s.size(layout))
             for s in algorithm.state(layout).values()]
    return sum(sizes) / max(1, layout.size)


def gather_workspace(nodes: int, d_max: int, p: int, width: int, blocks: int, budget: int = BUDGET) -> int:
    """Bytes the gather (engines/gather.py) holds beyond the state: the results (one row per
    receiver) and ``blocks`` blocks of messages, each as large as the gather makes them (as many
    receivers' ``(d_max + 1, P)`` rows as fit in ``budget``, engines.gather.chunk_rows). ``blocks``:
    the rule's ``Requires.gather_blocks`` (its messages and its (r, d, P) temporaries held at once:
    the median's padded copy, its sort's values and int64 indices), + 1 for an adversary's forged
    copy; 1 + 1 for a weighted sum under attack. Checked against benchmarks/gather.py's peaks per
    rule (tests/test_message_passing.py)."""
    row = (d_max + 1) * p * width
    rows = min(nodes, max(1, budget // max(1, row)))
    return nodes * p * width + blocks * rows * row


def max_in_degree(topology) -> int:
    """The largest in-degree of a topology config's graph (its round-0 graph where redrawn)."""
    g = build(topology.name, topology.n, topology.k, 0)
    if hasattr(g, "in_degrees"):
        return int(g.in_degrees().max(initial=0))
    if hasattr(g, "degrees"):
        return int(g.degrees().max(initial=0))
    return int(in_degree(sp.csr_matrix(g)).max(initial=0))      # a registered W


def estimate(run, shards: int = 1, replicas: int = 1) -> tuple[int, str]:
    """(bytes, how they add up) for a validated run (``run.cfg`` its typed config,
    ``run.algorithm``), per device when its nodes are sharded over ``shards`` devices
    (runtime/shard.py); ``replicas`` runs in one batch multiply the nodes."""
    cfg = run.cfg
    spec = get_spec(cfg.data.name)
    with torch.device("meta"):
        layout = Layout.of(build_model(cfg.model.name, spec.shape, spec.num_classes, cfg.model.norm, cfg.model.width))
    p = layout.size
    nodes = cfg.topology.nodes if cfg.engine.name == "tick" else cfg.topology.n
    n = -(-nodes * replicas // shards)
    edges = any(isinstance(s, PerEdge) for s in run.algorithm.state(layout).values())
    gathers = run.algorithm.requires.gather or cfg.adversary.active
    d_max = max_in_degree(cfg.topology) if edges or gathers else 0
    copies = COPIES[cfg.engine.name] + declared_copies(run.algorithm, layout, d_max)
    data = (spec.n_train + spec.n_test) * math.prod(spec.shape)
    width = 8 if cfg.precision == "fp64" else 4
    margin = MARGIN[cfg.engine.name]
    blocks = (run.algorithm.requires.gather_blocks if run.algorithm.requires.gather else 1) + int(cfg.adversary.active)
    work = gather_workspace(n, d_max, p, width, blocks) if gathers else 0
    timed = seconds_workspace(run, n, p, width) if cfg.engine.name == "tick" and cfg.clock.enabled else 0
    total = int(n * p * width * copies + data + margin + work + timed)
    return total, (f"{n} nodes x {p:,} parameters x {width} bytes x {copies:g} copies of the state + "
                   f"{data / 2**30:.2f} GiB of {spec.name} + {margin / 2**30:.1f} GiB of working space"
                   + (f" + {work / 2**20:.0f} MiB for the gather" if work else "")
                   + (f" + {timed / 2**20:.0f} MiB for messages in seconds" if timed else ""))


CLOCK_RUNTIME = 128 << 20    # numba's compiled link sharing (measured: +117 MiB at its first call)
PART_POSITIONS = 1 << 22     # the parts inbox's budget: parameter positions one receive step handles at once


def seconds_workspace(run, n: int, p: int, width: int) -> int:
    """The tick engine in seconds (engines/tick/timed/): the link-sharing runtime, one send
    wave's snapshot (every node's model), the inbox its algorithm declares (``inbox = "parts"``:
    :func:`parts_workspace`) and its own receive state (``TickAlgorithm.seconds_workspace``, e.g.
    SWIFT's latest model per link). Snapshots of later waves still in flight are not counted: on
    links too slow for the sends their backlog grows with the run (summary.json's
    ``clock.in_flight`` says how many)."""
    d_max = max_in_degree(run.cfg.topology)
    inbox = parts_workspace(n, p, width) if run.algorithm.inbox == "parts" else 0
    return CLOCK_RUNTIME + n * p * width + inbox + int(run.algorithm.seconds_workspace(n, p, width, d_max))


def parts_workspace(n: int, p: int, width: int) -> int:
    """Bytes of the parts inbox (engines/tick/timed/parts.py): the sums and counts (n, P), a wave's
    part ids (int8) and parameter order (int64), and one step's positions (int64 indices, values)."""
    return 2 * n * p * width + n * p * (1 + 8) + PART_POSITIONS * (9 * 8 + 2 * width)   # ~9 int64 temporaries a position


def available(device: torch.device) -> int | None:
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def reset_peak(device: torch.device) -> None:
    """Start measuring this run's peak memory: the process's peak resident set (Linux: VmHWM,
    reset through /proc/self/clear_refs, so a sweep's jobs in one process each get their own) or
    the CUDA device's peak allocation."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def peak(device: torch.device) -> int | None:
    """Bytes: the peak since :func:`reset_peak` (None where the platform does not say)."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
