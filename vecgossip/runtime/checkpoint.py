"""Checkpoints: the whole simulation state in one file, written atomically, for exact resume.

An engine's ``state_dict()`` holds everything that evolves (stacked parameters, momentum, counters,
buffers, schedules, active links, sampler positions, the history so far, the loop position) and
every random generator's state (torch CPU/CUDA generators, numpy bit generators); its
``load_state_dict`` puts them back, so a resumed run draws the same numbers and computes the same
tensors as the uninterrupted one. :class:`Checkpointer` decides when to write (every ``every``
ticks/rounds and/or every ``seconds`` of wall time) and writes on request (SIGINT/SIGTERM).
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any


import numpy as np
import torch

from vecgossip.core.errors import ConfigError
from vecgossip.core.files import atomic_path

Tensor = torch.Tensor

FILE = "checkpoint.pt"
VERSION = 1
# options that steer a run without changing what it computes: they may differ between a run and its resume
RUN_CONTROL = ("resume", "checkpoint_every", "checkpoint_seconds", "progress", "data_root", "data.root", "logger",
               "distributed.enabled", "distributed.backend", "distributed.exchange")
# options added after checkpoints existed, with the value every earlier checkpoint ran under: a
# checkpoint that lacks one resumes as if it had it (upgrading mid-sweep does not strand a run)
PREDATED = {"model.exec": "batched"}
# options whose value here may say "as the run decided": a resume takes the decision its checkpoint
# recorded (the engine state's "execution"), so that value matches whatever the run chose
AS_DECIDED = {"model.exec": "auto"}


def file_name(rank: int = 0, world: int = 1) -> str:
    """``checkpoint.pt``; sharded runs (shard.py) write one file per rank, named by rank and world size."""
    return FILE if world == 1 else f"checkpoint.rank{rank}of{world}.pt"


def generator_state(gen: torch.Generator) -> torch.Tensor:
    return gen.get_state()


def set_generator_state(gen: torch.Generator, state: torch.Tensor) -> None:
    gen.set_state(state.cpu() if gen.device.type == "cpu" else state)


def rng_state(rng: np.random.Generator) -> dict:
    return rng.bit_generator.state


def set_rng_state(rng: np.random.Generator, state: dict) -> None:
    rng.bit_generator.state = state


CRC32 = False   # torch.save's per-record CRC32: ~25% of a write's time here; the atomic rename guards it


def save(path: Path, payload: dict[str, Any], crc32: bool | None = None) -> None:
    """Atomically (temp file + rename): a kill mid-write leaves the previous checkpoint intact.
    Without torch.save's CRC32 of every record (``CRC32``): the rename, not a checksum, is what
    keeps a half-written file from being read, and torch.load reads the file either way."""
    from torch import serialization
    before = serialization.get_crc32_options()
    serialization.set_crc32_options(CRC32 if crc32 is None else crc32)
    try:
        with atomic_path(Path(path)) as tmp:
            torch.save({"version": VERSION, **payload}, tmp)
    finally:
        serialization.set_crc32_options(before)


def load(path: Path) -> dict[str, Any]:
    """The checkpoint at ``path``, memory-mapped: its tensors are the file's pages, read as they
    are touched (see :func:`copy_in`)."""
    blob = torch.load(Path(path), weights_only=False, map_location="cpu", mmap=True)
    if blob.get("version") != VERSION:
        raise ValueError(f"{path}: checkpoint version {blob.get('version')!r}, this vecgossip reads {VERSION}")
    _LOADED[:] = [Path(path).resolve()]
    return blob


# -- loading without a second copy of the state: the checkpoint's pages handed back as they are copied
_LOADED: list[Path] = []                # the last loaded checkpoint file
CHUNK_BYTES = 64 << 20                  # rows copied (then released) at a time
_MADV_PAGEOUT = 21                      # Linux >= 5.4: reclaim these pages (file pages are dropped; a hint)


def _file_ranges(path: Path) -> list[tuple[int, int]]:
    """Where ``path`` is mapped in this process (/proc/self/maps; empty elsewhere than Linux)."""
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return []
    name, out = str(path), []
    for line in lines:
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5] == name:
            lo, hi = (int(a, 16) for a in parts[0].split("-"))
            out.append((lo, hi))
    return out


def release(t: Tensor, mapped: list[tuple[int, int]] | None = None) -> None:
    """Hand the pages behind ``t`` back to the kernel if ``t`` lies in the last loaded checkpoint's
    file mapping (clean file pages: read again from the file if touched again); otherwise nothing.
    ``mapped``: that mapping's address ranges, looked up now if not given (an address once the
    file's may since be anything else)."""
    if not _LOADED or t.device.type != "cpu" or t.numel() == 0 or not sys.platform.startswith("linux"):
        return
    lo = t.data_ptr()
    hi = lo + t.element_size() * (1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride())))
    if not any(a <= lo and hi <= b for a, b in (_file_ranges(_LOADED[0]) if mapped is None else mapped)):
        return
    page = os.sysconf("SC_PAGESIZE")
    start = lo // page * page
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(hi - start), ctypes.c_int(_MADV_PAGEOUT))
    except (OSError, AttributeError):
        pass


def copy_in(dst: Tensor, src: Tensor, rows: Tensor | None = None) -> None:
    """``dst.copy_(src)`` (``rows`` given: ``dst[rows] = src``) in blocks of rows of at most
    ``CHUNK_BYTES``, each block of a memory-mapped checkpoint released once copied: a resumed
    run's resident set then peaks at its own state plus one block, not at its state plus the
    checkpoint's (results/resume_memory_cpu/).
    A source that broadcasts into ``dst`` (another shape) is copied whole."""
    blocks = src.dim() > 0 and (rows is not None or dst.shape == src.shape)
    n = src.shape[0] if blocks else 1
    step = max(1, CHUNK_BYTES // max(1, src[0].numel() * src.element_size())) if blocks and n else n
    mapped = _file_ranges(_LOADED[0]) if _LOADED and src.device.type == "cpu" else []   # once per tensor
    for lo in range(0, n, step or 1):
        block = src[lo:lo + step] if blocks else src
        if rows is None:
            (dst[lo:lo + step] if blocks else dst).copy_(block)
        else:
            dst[rows[lo:lo + step].to(dst.device)] = block.to(dst.device)
        release(block, mapped)


MAX_SHARE = 0.02   # timed checkpoints take at most this share of wall time (see Checkpointer.due)


class Checkpointer:
    """Called by an engine after every tick/round with its position; writes ``FILE`` into ``out``
    every ``every`` ticks/rounds (None: off) and whenever ``seconds`` of wall time have passed
    since the last write (None: off), and when :meth:`request` was called (a signal).

    Timed writes are spaced by at least ``last write time / MAX_SHARE``: a state whose write takes
    longer than 2% of ``seconds`` (a large state on a slow disk) is
    checkpointed less often rather than costing more than 2% of the run.

    Sharded, ``agree(flag) -> bool`` (any rank) makes every rank write, and stop, at the same step;
    ``name`` is this rank's file."""

    def __init__(self, out: Path, every: int | None, seconds: float | None, meta: dict, start: int = 0,
                 name: str = FILE, agree=None) -> None:
        self.path = Path(out) / name
        self.agree = agree if agree is not None else bool
        self.every, self.seconds, self.meta = every, seconds, meta
        self.last_pos = start
        self.last_time = time.monotonic()
        self.requested = False
        self.written = 0
        self.write_seconds = 0.0

    def request(self) -> None:
        self.requested = True

    def due(self, pos: int) -> bool:
        if self.requested:
            return True
        if self.every is not None and pos - self.last_pos >= self.every:
            return True
        return self.seconds is not None and \
            time.monotonic() - self.last_time >= max(self.seconds, self.write_seconds / MAX_SHARE)

    def step(self, pos: int, end: int, hist, wall: float, state_fn) -> bool:
        """The engines' hook after each tick/round: before ``end``, bring ``hist.wall_seconds`` up
        to date, write if due, and mark ``hist.interrupted`` when a signal asked to stop."""
        if pos >= end:
            return False
        hist.wall_seconds = wall
        if self(pos, state_fn):
            hist.interrupted = True
        return hist.interrupted

    def __call__(self, pos: int, state_fn) -> bool:
        """Write ``state_fn()`` if due; returns whether a stop was requested (the engine then ends
        the run at this position)."""
        asked = self.requested                 # a signal may land at any moment: decide on this value
        if not self.agree(asked or self.due(pos)):
            return False
        asked = self.agree(asked)
        start = time.monotonic()
        save(self.path, {"meta": self.meta, "pos": pos, "engine": state_fn()})
        self.last_pos, self.last_time = pos, time.monotonic()
        self.write_seconds = self.last_time - start
        self.written += 1
        self.requested |= asked
        return asked


# -- resume: which checkpoint, and is it this config's (the run loop in sim.py) -------------------
def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        out.update(_flat(v, key + ".") if isinstance(v, dict) else {key: v})
    return out


def fingerprint(resolved: dict) -> dict:
    """The resolved config (plain values) without run-control options: what a resume must share
    with its run."""
    return {k: v for k, v in _flat(resolved).items() if k not in RUN_CONTROL}


def find(resume, out: Path | None, name: str = FILE) -> Path | None:
    """``resume``: auto: the run directory's checkpoint ``name`` if there is one; true: it must be
    there; false: start afresh; a path: that checkpoint file (or the folder holding it)."""
    if resume is False or resume in ("false", None):
        return None
    if resume in (True, "true", "auto"):
        path = None if out is None else out / name
        if path is not None and path.exists():
            return path
        if resume in (True, "true"):
            raise ConfigError(f"resume=true but there is no {name} in {out}")
        return None
    path = Path(resume)
    if name != FILE and not path.is_dir():   # sharded: every rank reads its own file there
        raise ConfigError(f"resume={resume}: a sharded run resumes from the folder holding its "
                          f"checkpoint.rank*of*.pt files; give resume=<that folder>")
    path = path / name if path.is_dir() else path
    if not path.exists():
        raise ConfigError(f"resume={resume}: no checkpoint there")
    return path


def load_resume(resolved: dict, path: Path) -> dict:
    """The checkpoint at ``path``, refused unless the config ``resolved`` wrote it."""
    blob = load(path)
    want, got = fingerprint(resolved), blob["meta"]["fingerprint"]
    got = {**{k: v for k, v in PREDATED.items() if k in want}, **got}
    diff = sorted(k for k in set(want) | set(got)
                  if want.get(k) != got.get(k) and not (k in got and want.get(k) == AS_DECIDED.get(k)))
    if diff:
        raise ConfigError(f"resume: {path} was written by a different config; it differs in "
                          + ", ".join(f"{k} ({got.get(k)!r} there, {want.get(k)!r} here)" for k in diff[:5]))
    return blob


@contextmanager
def on_signals(checkpointer):
    """SIGINT/SIGTERM ask the checkpointer for a checkpoint at the next step, then the run stops."""
    if checkpointer is None:
        yield
        return
    handler = lambda signum, frame: checkpointer.request()  # noqa: E731
    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
