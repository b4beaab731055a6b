"""Each node's compute time per local step, in seconds (issue 48): a device speed drawn once per
node from the run's seed (heterogeneous hardware; a node's steps then all take that long).

- ``constant``: every node ``seconds``;
- ``lognormal``: ``seconds * exp(N(0, sigma^2) - sigma^2 / 2)`` (mean ``seconds``; PAPAYA's and
  FedScale's model of device speed);
- ``pareto``: ``seconds * X`` with X Pareto(``shape``) scaled to mean 1 (``shape`` > 1; a heavy tail);
- ``stragglers``: ``round(fraction * n)`` nodes, drawn from the seed, ``slowdown`` times slower;
- ``trace``: a FedScale device-capacity trace (:mod:`.traces`): node i gets a device drawn from it
  and its ``computation`` (ms per sample of inference) gives FedScale's own formula,
  ``augmentation x batch x ms / 1000`` seconds a step (augmentation 3: the backward pass costs two
  forwards; FedScale's ``ClientMetadata.get_completion_time``)."""
from __future__ import annotations

from typing import Annotated, Literal, Optional

import numpy as np
from pydantic import Field

from vecgossip.core.options import Options

Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class ComputeConfig(Options):
    """How long a local step takes on each node."""

    model: Literal["constant", "lognormal", "pareto", "stragglers", "trace"] = "constant"
    seconds: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.1   # mean seconds a step (all but trace)
    sigma: Positive = 0.5                 # lognormal: the log's standard deviation
    shape: Annotated[float, Field(gt=1, allow_inf_nan=False)] = 2.0     # pareto: the tail index (> 1: finite mean)
    fraction: Annotated[float, Field(ge=0, le=1)] = 0.1      # stragglers: the share of slow nodes
    slowdown: Annotated[float, Field(ge=1, allow_inf_nan=False)] = 10.0  # stragglers: how many times slower
    trace: Optional[str] = None           # trace: a FedScale device-capacity file (pickle or json)
    augmentation: Positive = 3.0          # trace: FedScale's factor (forward + backward = 3 inferences)


def step_seconds(cfg: ComputeConfig, n: int, batch: int, rng: np.random.Generator,
                 devices: dict | None = None, ids: list | None = None) -> np.ndarray:
    """(n,) seconds per local step of batch ``batch`` on each node. ``devices``: the trace's
    {client: {"computation": ms per sample, "communication": kbps}} (read by :mod:`.traces`);
    ``ids``: each node's device in it (default: :func:`pick_devices`'s draw from ``rng``)."""
    if cfg.model == "constant":
        return np.full(n, cfg.seconds)
    if cfg.model == "lognormal":
        return cfg.seconds * np.exp(rng.normal(0.0, cfg.sigma, n) - cfg.sigma ** 2 / 2)
    if cfg.model == "pareto":
        x = 1.0 + rng.pareto(cfg.shape, n)                         # Pareto(shape) with minimum 1
        return cfg.seconds * x * (cfg.shape - 1) / cfg.shape        # mean 1 -> mean seconds
    if cfg.model == "stragglers":
        out = np.full(n, cfg.seconds)
        out[rng.choice(n, int(round(cfg.fraction * n)), replace=False)] *= cfg.slowdown
        return out
    if devices is None:
        raise ValueError("compute model trace needs its devices (clock.compute.trace)")
    ids = pick_devices(devices, n, rng) if ids is None else ids
    ms = np.array([float(devices[i]["computation"]) for i in ids])
    return fedscale_computation(ms, batch, 1, cfg.augmentation)


def pick_devices(devices: dict, n: int, rng: np.random.Generator) -> list:
    """n device ids drawn from a trace, without replacement when it has n or more (else with)."""
    keys = sorted(devices)
    at = rng.choice(len(keys), n, replace=n > len(keys))
    return [keys[i] for i in at]


def fedscale_computation(ms_per_sample, batch: int, local_steps: int, augmentation: float = 3.0):
    """FedScale's computation latency (s): augmentation x batch x local steps x ms per sample / 1000."""
    return augmentation * batch * local_steps * np.asarray(ms_per_sample, float) / 1000.0


def trace_bandwidth(devices: dict, ids: list) -> np.ndarray:
    """(n,) bytes a second of each node's link from its device's ``communication`` (kbps, FedScale's
    one rate for upload and download: ``(upload + download) kbit / kbps`` seconds)."""
    return np.array([float(devices[i]["communication"]) for i in ids]) * 1e3 / 8


def fedscale_communication(upload_kbit, download_kbit, kbps):
    """FedScale's communication latency (s): (upload + download) kbit / kbps, a model's kbit being
    its bytes x 8 / 1024 (FedScale's ``model_update_size``)."""
    return (np.asarray(upload_kbit, float) + np.asarray(download_kbit, float)) / np.asarray(kbps, float)
