"""Will the run fit? An estimate made before anything is allocated, so that a run the device cannot
hold is refused at once, with the numbers, instead of failing (or swapping) hours later.

Estimate = nodes x parameters x 4 bytes (fp64: 8) x copies of the stacked state + the algorithm's
declared per-node state + the data set as uint8 + a fixed working space. Both engines hold 3 copies
(tick: parameters, momentum, buffer sums; rounds: parameters, momentum, gossip scratch); the working
space is 1 GiB on the tick clock and 1.3 GiB for rounds (the torch runtime, the clients' local test
sets, one chunk's gradients and activations). Measured against peaks in the scaling study (one
process per run, AMD EPYC; results/scaling_cpu/): tick N = 50 ... 2000 within 0.99-1.14x, rounds
(DFedAvgM, the CNN) m = 16 ... 256 within 0.98-1.01x. Available = MemAvailable (Linux) on the CPU,
free memory on a CUDA device.
"""
from __future__ import annotations

import math

import torch
from omegaconf import DictConfig, OmegaConf

from vecgossip.data.registry import get_spec
from vecgossip.models import get_model
from vecgossip.core.state import Layout
from vecgossip.network.topology import node_count

COPIES = {"tick": 3, "rounds": 3}
MARGIN = {"tick": 1 << 30, "rounds": int(1.3 * (1 << 30))}


def model_size(name: str, shape: tuple[int, int, int], classes: int) -> int:
    with torch.device("meta"):
        return Layout.of(get_model(name).factory(shape, classes)).size


def declared_copies(cfg: DictConfig, spec) -> float:
    """The algorithm's declared per-node state (algorithms.PerNode), in copies of the state."""
    from vecgossip.algorithms import load
    from vecgossip.runtime.replicas import expand
    node = OmegaConf.select(expand(cfg)[0], "algorithm")     # replicas: per-replica values are scalars there
    if node is None:
        return 0
    with torch.device("meta"):
        layout = Layout.of(get_model(cfg.model.name).factory(spec.shape, spec.num_classes))
    sizes = [math.prod(s.size(layout)) for s in load(node).state(layout).values()]
    return sum(sizes) / max(1, layout.size)


def estimate(cfg: DictConfig, shards: int = 1, replicas: int = 1) -> tuple[int, str]:
    """(bytes, how they add up) for the run ``cfg`` describes, per device when its nodes are
    sharded over ``shards`` devices (shard.py); ``replicas`` runs in one batch multiply the nodes."""
    spec = get_spec(cfg.data.name)
    p = model_size(cfg.model.name, spec.shape, spec.num_classes)
    n = -(-node_count(cfg.topology.name, int(cfg.topology.n)) * replicas // shards)
    copies = COPIES[cfg.engine.name] + declared_copies(cfg, spec)
    data = (spec.n_train + spec.n_test) * math.prod(spec.shape)
    width = 8 if cfg.get("precision") == "fp64" else 4
    margin = MARGIN[cfg.engine.name]
    total = int(n * p * width * copies + data + margin)
    return total, (f"{n} nodes x {p:,} parameters x {width} bytes x {copies:g} copies of the state + "
                   f"{data / 2**30:.2f} GiB of {spec.name} + {margin / 2**30:.1f} GiB of working space")


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
