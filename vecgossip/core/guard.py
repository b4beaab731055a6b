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
    """Positions of the non-finite entries of per-row sums (M,): the diverged rows."""
    return torch.nonzero(~torch.isfinite(row_sums)).flatten().cpu().numpy()


def nonfinite_rows(theta: Tensor, rows: Tensor | None = None) -> np.ndarray:
    """Indices (into ``rows``, or into theta when None) of rows with a NaN or inf entry. All rows
    are summed (one contiguous pass, far cheaper on the CPU than gathering a subset of large rows:
    benchmarks/RESULTS.md) and the subset picked from the (N,) sums."""
    sums = theta.sum(1)
    return nonfinite(sums if rows is None else sums[rows])
