"""Divergence guard: nodes whose parameters are no longer finite, found with one reduction per step.

A row sum propagates NaN and inf (and overflows to inf for parameters past ~1e37), so
``isfinite(row_sum)`` flags every diverged row. The engines take the sums of the rows that just
changed where those rows already are at hand (each training chunk right after its update; all rows
after a round's local steps), with no gather and a single host transfer per step. Policies (``on_divergence``): ``stop`` ends the run at once
(outputs written, the last checkpoint, written while every node was finite, kept; exit code 3);
``isolate`` takes the diverged nodes out: they stop training and sending, their neighbours stop
waiting for them (tick engine) or mix without them (round engine: they leave W; their rows are
zeroed, since a dense W @ X would turn a 0 weight times NaN into NaN), and the metrics report them
(``nodes_diverged`` / ``clients_diverged``, NaN in accuracy.npy) and leave them out.

Reading the sums is a host sync. On a GPU under ``stop`` the tick engine reads them every
``engine.guard_every`` ticks (auto: every evaluation): in between, a :class:`Watch` keeps the rows
found non-finite on the device, and checkpoints are written only at ticks where it was read, so a
kept checkpoint never holds a diverged node unseen. The run then stops at the read, naming the
diverged node and the neighbours that averaged its model meanwhile. ``isolate`` reads every tick
(a node isolated late has already spread its NaN through its receivers' buffers; a larger
guard_every is refused with it), and so does a CPU, where a read costs nothing.
"""
from __future__ import annotations

import numpy as np
import torch

Tensor = torch.Tensor
POLICIES = ("stop", "isolate")


class Diverged(RuntimeError):
    """Raised inside an engine step under ``on_divergence=stop``."""

    def __init__(self, pos: int, nodes: np.ndarray, unit: str = "tick") -> None:
        shown = ", ".join(map(str, nodes[:10])) + (", ..." if nodes.size > 10 else "")
        super().__init__(f"{nodes.size} node(s) diverged (non-finite parameters) at {unit} {pos}: {shown}")
        self.pos, self.nodes, self.unit = pos, nodes, unit


def nonfinite(row_sums: Tensor) -> np.ndarray:
    """Positions of the non-finite entries of per-row sums (M,): the diverged rows. One host read
    (a flag) when every row is finite; the positions only when one is not."""
    bad = ~torch.isfinite(row_sums)
    if not bool(bad.any()):
        return np.zeros(0, dtype=np.int64)
    return torch.nonzero(bad).flatten().cpu().numpy()


def nonfinite_rows(theta: Tensor, rows: Tensor | None = None) -> np.ndarray:
    """Indices (into ``rows``, or into theta when None) of rows with a NaN or inf entry. All rows
    are summed (one contiguous pass, far cheaper on the CPU than gathering a subset of large rows:
    benchmarks/RESULTS.md) and the subset picked from the (N,) sums."""
    sums = theta.sum(1)
    return nonfinite(sums if rows is None else sums[rows])


class Watch:
    """The non-finite rows of an (n, P) state, noted on the device step after step and read (one
    host sync) when due: ``note`` ORs in each step's row sums, ``read`` returns the rows flagged
    since the last read and clears them."""

    def __init__(self, n: int, device: torch.device | str) -> None:
        self.bad = torch.zeros(n, dtype=torch.bool, device=device)      # (n,) flagged rows
        self.pending = False                                             # noted since the last read

    def note(self, rows: Tensor | None, sums: Tensor) -> None:
        """``sums`` (M,) the row sums of ``rows`` (M,) (device indices; None: all rows in order)."""
        flag = ~torch.isfinite(sums)
        if rows is None:
            self.bad.logical_or_(flag)
        else:
            self.bad[rows] = self.bad[rows] | flag
        self.pending = True

    def read(self) -> np.ndarray:
        """The rows flagged since the last read (host indices), cleared."""
        if not self.pending:
            return np.zeros(0, dtype=np.int64)
        out = torch.nonzero(self.bad).flatten().cpu().numpy()
        self.bad.zero_()
        self.pending = False
        return out
