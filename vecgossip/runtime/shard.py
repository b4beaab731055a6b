"""Node sharding over processes with torch.distributed (``torchrun``: gloo on CPUs, NCCL on GPUs).

Each rank owns a contiguous slice ``[lo, hi)`` of the node axis: its rows of the parameters,
momentum, counters and model buffers. What is small and drives control flow is replicated on
every rank and evolves identically there: the training schedule, the links, the per-node label
mixes, and every random generator. Every rank draws the random numbers of ALL nodes (batch
indices, crops, T_acq steps, compression masks, peer drops), in the single process's order, and
uses its slice. So a sharded run computes, node for node, the same floating-point operations as one
process, and its outputs are the same bit for bit on the CPU whatever the number of ranks
(tests/test_distributed.py); the price is that the draws (not the training) are repeated per rank.

What crosses ranks, per tick (:class:`Shard` methods, all no-ops with one process):
- the sent models: ``all_gather`` of every sender's row (simple; each rank receives every sent
  model), or ``all_to_all`` of only the rows whose receivers live on the destination rank (what
  scales: a ring or a sparse regular graph needs a few rows per rank, not all);
- per-node scalars and (N, L) layer statistics for the metrics, and the divergence guard's and
  the averaging step's counts (a few bytes).

``Shard.bytes_in`` counts the model bytes a rank received from other ranks (the cost model of
benchmarks/distributed.py and README "Scale-out").
"""
from __future__ import annotations

import atexit
import math
import os
import sys
from dataclasses import dataclass, field
from typing import Literal, Union

import numpy as np
import torch

from vecgossip.core.options import Options

Tensor = torch.Tensor
EXCHANGES = ("all_to_all", "all_gather")
BACKENDS = ("auto", "gloo", "nccl")


class DistributedConfig(Options):
    """The ``distributed`` group: node sharding under torchrun (README "Scale-out")."""

    enabled: Union[Literal["auto"], bool] = "auto"   # auto: on when torchrun starts more than one process
    backend: Literal["auto", "gloo", "nccl"] = "auto"   # auto: nccl on cuda, gloo on cpu
    exchange: Literal["all_to_all", "all_gather"] = "all_to_all"   # sent models: only the rows each rank needs | every row


def row_bytes(rows: Tensor) -> int:
    return math.prod(rows.shape[1:]) * rows.element_size()


def world_from_env() -> tuple[int, int, int]:
    """(rank, world size, local rank) as torchrun sets them; (0, 1, 0) outside torchrun."""
    return (int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
            int(os.environ.get("LOCAL_RANK", 0)))


def split(n: int, world: int) -> np.ndarray:
    """(world + 1,) shard bounds: contiguous, sizes differing by at most one (the first n % world
    ranks hold one node more)."""
    sizes = np.full(world, n // world, dtype=np.int64)
    sizes[: n % world] += 1
    return np.concatenate([[0], np.cumsum(sizes)])


@dataclass
class Shard:
    """This process's slice of the node axis, and the collectives that join the slices."""

    n: int                                  # nodes in the whole simulation
    rank: int = 0
    world: int = 1
    exchange: str = "all_to_all"
    bounds: np.ndarray = field(default=None)  # (world + 1,)
    bytes_in: float = 0.0                   # model bytes received from other ranks so far

    def __post_init__(self) -> None:
        if self.bounds is None:
            self.bounds = split(self.n, self.world)
        if self.exchange not in EXCHANGES:
            raise ValueError(f"distributed.exchange must be one of {', '.join(EXCHANGES)}, got {self.exchange!r}")

    @property
    def lo(self) -> int:
        return int(self.bounds[self.rank])

    @property
    def hi(self) -> int:
        return int(self.bounds[self.rank + 1])

    @property
    def size(self) -> int:
        return self.hi - self.lo

    @property
    def sharded(self) -> bool:
        return self.world > 1

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.bounds)

    # -- node sets -----------------------------------------------------------------------------
    def owner(self, nodes: np.ndarray) -> np.ndarray:
        """The rank holding each node."""
        return np.searchsorted(self.bounds, nodes, side="right") - 1

    def counts(self, nodes: np.ndarray) -> np.ndarray:
        """(world,) how many of the sorted global ``nodes`` each rank holds."""
        return np.diff(np.searchsorted(nodes, self.bounds))

    def block(self, nodes: np.ndarray) -> slice:
        """Positions, within the sorted global ``nodes``, of this rank's nodes (a contiguous run)."""
        a, b = np.searchsorted(nodes, [self.lo, self.hi])
        return slice(int(a), int(b))

    # -- collectives -----------------------------------------------------------------------------
    def gather_rows(self, rows: Tensor, counts: np.ndarray, models: bool = True) -> Tensor:
        """all_gather of variable-size row blocks: rank r gives ``counts[r]`` rows; every rank gets
        them all, concatenated in rank order (= ascending node order for sorted node sets)."""
        if not self.sharded:
            return rows
        import torch.distributed as dist
        width = int(counts.max())
        pad = rows.new_zeros(width, *rows.shape[1:])
        pad[: rows.shape[0]] = rows
        outs = [torch.empty_like(pad) for _ in range(self.world)]
        dist.all_gather(outs, pad)
        if models:
            self.bytes_in += float(counts.sum() - counts[self.rank]) * row_bytes(rows)
        return torch.cat([o[:c] for o, c in zip(outs, counts.tolist())])

    def gather_host(self, values: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """:meth:`gather_rows` of float64 host values over the gloo group: no trip through the
        device (a few bytes of per-node scalars, e.g. a send wave's sender weights)."""
        values = np.asarray(values, np.float64)
        if not self.sharded:
            return values.copy()
        import torch.distributed as dist
        pad = torch.zeros(int(counts.max()), dtype=torch.float64)
        pad[: values.size] = torch.from_numpy(values)
        outs = [torch.empty_like(pad) for _ in range(self.world)]
        dist.all_gather(outs, pad, group=cpu_group())
        return torch.cat([o[:c] for o, c in zip(outs, counts.tolist())]).numpy()

    def cat_nodes(self, local: Tensor) -> Tensor:
        """Per-node values of this rank's nodes (size, ...) -> those of all nodes (N, ...)."""
        return self.gather_rows(local, self.sizes, models=False)

    def exchange_rows(self, rows: Tensor, send: list[np.ndarray], recv_counts: np.ndarray) -> Tensor:
        """all_to_all: ``send[r]`` are the positions (in ``rows``, this rank's rows) that rank r
        needs; returns the rows this rank receives, ``recv_counts[q]`` from rank q, in rank order."""
        import torch.distributed as dist
        order = np.concatenate(send) if send else np.zeros(0, dtype=np.int64)
        out_rows = rows[torch.from_numpy(order).to(rows.device)] if order.size else rows[:0]
        got = rows.new_empty(int(recv_counts.sum()), *rows.shape[1:])
        dist.all_to_all_single(got, out_rows.contiguous(), [int(c) for c in recv_counts],
                               [int(s.size) for s in send])
        self.bytes_in += float(recv_counts.sum() - recv_counts[self.rank]) * row_bytes(rows)
        return got

    def sum_int(self, value: int) -> int:
        if not self.sharded:
            return int(value)
        import torch.distributed as dist
        t = torch.tensor([int(value)], dtype=torch.int64)
        dist.all_reduce(t, group=cpu_group())
        return int(t.item())

    def any(self, flag: bool) -> bool:
        return self.sum_int(int(bool(flag))) > 0

    def union(self, nodes: np.ndarray) -> np.ndarray:
        """Sorted union over ranks of node index sets (rare: the guard's diverged nodes)."""
        if not self.sharded or self.sum_int(nodes.size) == 0:
            return nodes
        import torch.distributed as dist
        parts: list = [None] * self.world
        dist.all_gather_object(parts, nodes.tolist(), group=cpu_group())
        return np.array(sorted({int(v) for p in parts for v in p}), dtype=np.int64)

    def broadcast(self, obj):
        """Rank 0's Python object on every rank."""
        if not self.sharded:
            return obj
        import torch.distributed as dist
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=cpu_group())
        return box[0]


_CPU_GROUP = {"group": None}


def cpu_group():
    """A gloo group for host-side scalars and objects (the default group is NCCL on GPUs)."""
    import torch.distributed as dist
    if dist.get_backend() == "gloo":
        return None
    if _CPU_GROUP["group"] is None:
        _CPU_GROUP["group"] = dist.new_group(backend="gloo")
    return _CPU_GROUP["group"]


def start(enabled, backend: str, device: torch.device) -> tuple[int, int, torch.device]:
    """Join torchrun's process group when asked (``distributed.enabled``: auto = when launched with
    more than one process). Returns (rank, world, device): with CUDA each rank takes the GPU of its
    local rank. One process stays exactly the single-process simulator."""
    rank, world, local = world_from_env()
    want = world > 1 if enabled in ("auto", None) else bool(enabled)
    if not want:
        return 0, 1, device
    import torch.distributed as dist
    if not dist.is_initialized():
        if backend == "auto":
            backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(local)
        dist.init_process_group(backend=backend)
        atexit.register(stop)
    if device.type == "cuda":
        device = torch.device("cuda", local)
    return dist.get_rank(), dist.get_world_size(), device


def stop(barrier: bool = False, code: int | None = None) -> None:
    """Leave the process group: explicitly at the end of the run (``barrier``: once every rank is
    there, so none tears gloo down under another's last collective), and at exit as a fallback (an
    exit without it aborts gloo's threads). The group lives as long as the process: the demo runs
    two simulations in it. ``code`` (the entry point's end): end this worker process right here
    with that exit code, its output flushed, without destroying the group or tearing the
    interpreter down: gloo's threads sometimes abort there ("terminate called without an active
    exception", exit -6, seen in about one CI run in ten), after every output was written."""
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        return
    if barrier:
        try:
            dist.barrier(group=cpu_group())
        except RuntimeError:      # a rank already gone: leave anyway
            pass
    if code is not None:
        import logging
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    dist.destroy_process_group()
    _CPU_GROUP["group"] = None
