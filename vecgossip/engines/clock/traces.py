"""Traces in the formats the field already uses (issue 48), read and generated.

- **FedScale device capacity** (``client_device_capacity``, a pickle): ``{client_id: {"computation":
  ms per sample of inference, "communication": kbps}}`` (FedScale's docs, "Device Trace File
  Formats"; 500,000 devices from AI Benchmark and MobiPerf in the published one).
- **FedScale client behaviour** (``client_behave_trace``, a pickle): ``{client_id: {"duration": s,
  "inactive": [s, ...], "finish_time": s, "active": [s, ...], "model": str}}``: the client is online
  from ``active[k]`` to ``inactive[k]``, the whole pattern repeating every ``finish_time`` seconds.
- **Latency matrix** (Plexus; sacs-epfl's simulators): a square text matrix of milliseconds, one row
  per sender (:func:`~.links.latency_matrix` reads it).

The published traces come with FedScale (``benchmark/dataset/data/device_info/`` of
SymbioticLab/FedScale: ``client_device_capacity``, ``client_behave_trace``); they are not shipped
here. :func:`write_examples` writes small traces of each format from a seed (no download), for the
tests and the docs' example. JSON files with the same fields are read too (keys become ints)."""
from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np


def read(path: str | Path) -> dict:
    """A FedScale trace (pickle, or JSON with the same fields) as {int client id: entry}."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{path}: no such trace file")
    if p.suffix == ".json":
        raw = json.loads(p.read_text())
    else:
        with p.open("rb") as f:
            raw = pickle.load(f)
    if not isinstance(raw, dict) or not raw:
        raise ValueError(f"{path}: a FedScale trace is a non-empty dict of client id -> entry")
    return {int(k): v for k, v in raw.items()}


def check_capacity(trace: dict, path: str = "trace") -> None:
    for k, v in trace.items():
        if not {"computation", "communication"} <= set(v):
            raise ValueError(f"{path}: client {k} has no computation/communication (a device-capacity trace)")
        if not (float(v["computation"]) >= 0 and float(v["communication"]) > 0):
            raise ValueError(f"{path}: client {k}: computation >= 0 ms/sample and communication > 0 kbps")


def check_behaviour(trace: dict, path: str = "trace") -> None:
    for k, v in trace.items():
        if not {"active", "inactive", "finish_time"} <= set(v):
            raise ValueError(f"{path}: client {k} has no active/inactive/finish_time (a client-behaviour trace)")
        if len(v["active"]) != len(v["inactive"]) or not float(v["finish_time"]) > 0:
            raise ValueError(f"{path}: client {k}: as many active as inactive times, and finish_time > 0")


def online(entry: dict, t: np.ndarray | float) -> np.ndarray:
    """Whether a client of a behaviour trace is online at times ``t`` (s): active[k] <= t mod
    finish_time <= inactive[k] for some k (FedScale's ``ClientMetadata.is_active``, as intervals)."""
    tt = np.mod(np.asarray(t, float), float(entry["finish_time"]))
    on = np.zeros(tt.shape, dtype=bool)
    for a, b in zip(entry["active"], entry["inactive"]):
        on |= (a <= tt) & (tt <= b)
    return on


def write_examples(folder: str | Path, n: int = 60, seed: int = 0) -> dict[str, Path]:
    """Small traces of each format for ``n`` clients: ``device_capacity.pkl`` (lognormal compute,
    a median of 40 milliseconds a sample, and bandwidth around 10 Mbps), ``behaviour.pkl`` (a day of
    online/offline sessions per client) and ``latency.txt`` (clients on a plane, latency by
    distance, 1 to 100 milliseconds). Returns the paths by format."""
    rng = np.random.default_rng(seed)
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    cap = {i: {"computation": float(40 * np.exp(rng.normal(0, 0.5))),
               "communication": float(10_000 * np.exp(rng.normal(0, 0.7)))} for i in range(n)}
    day = 86_400.0
    behave = {}
    for i in range(n):
        starts = np.sort(rng.uniform(0, day, 3))
        ends = np.minimum(starts + rng.uniform(600, 4 * 3600, 3), np.r_[starts[1:], day])
        behave[i] = {"duration": float((ends - starts).sum()), "active": starts.tolist(),
                     "inactive": ends.tolist(), "finish_time": day, "model": "synthetic"}
    xy = rng.uniform(0, 1, (n, 2))
    ms = 1 + 99 * np.linalg.norm(xy[:, None] - xy[None], axis=2) / np.sqrt(2)
    np.fill_diagonal(ms, 0.0)
    paths = {"capacity": out / "device_capacity.pkl", "behaviour": out / "behaviour.pkl",
             "latency": out / "latency.txt"}
    with paths["capacity"].open("wb") as f:
        pickle.dump(cap, f)
    with paths["behaviour"].open("wb") as f:
        pickle.dump(behave, f)
    np.savetxt(paths["latency"], ms, fmt="%.3f", delimiter=",",
               header="one-way latency in ms, row = sender (vecgossip.engines.clock.traces.write_examples)")
    return paths
