"""Shared fixtures. Real-MNIST tests read $VECGOSSIP_DATA (default: ../shared/data beside the
repository). Without the data they skip, unless VECGOSSIP_REQUIRE_DATA=1 (as in CI), where a
missing data set is a failure."""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from vecgossip.data.dataset import Dataset, LabelIndex

REPO = Path(__file__).resolve().parents[1]


def pytest_configure(config):
    """model.exec=auto decides once per model and machine and caches the answer: the suite keeps
    its own cache (this process and the CLI runs it starts), never the user's."""
    import tempfile
    os.environ.setdefault("VECGOSSIP_EXEC_CACHE", str(Path(tempfile.mkdtemp(prefix="vecgossip-exec-")) / "exec.json"))


def mnist_root() -> Path:
    env = os.environ.get("VECGOSSIP_DATA")
    return Path(env) if env else REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def data_root() -> Path:
    root = mnist_root()
    if not (root / "MNIST" / "raw" / "train-images-idx3-ubyte").exists():
        msg = f"MNIST not found under {root}/MNIST/raw (set VECGOSSIP_DATA)"
        if os.environ.get("VECGOSSIP_REQUIRE_DATA") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    return root


def synthetic_dataset(m: int = 200, seed: int = 0) -> Dataset:
    """Random uint8 images with balanced labels (label i at rows where row % 10 == i)."""
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (m, 1, 28, 28), generator=g, dtype=torch.uint8)
    labels = torch.arange(m) % 10
    return Dataset(images, labels, LabelIndex.of(labels))


def ulp_moved(t: torch.Tensor, seed: int) -> torch.Tensor:
    """``t`` with every element moved one ulp up or down (a coin per element, seeded; seed 0: ``t``
    itself): a stand-in for a CPU whose kernels round differently (issue 22's float32 tests)."""
    if not seed:
        return t
    up = torch.rand(t.shape, generator=torch.Generator().manual_seed(seed)) < 0.5
    return torch.where(up, torch.nextafter(t, t + 1), torch.nextafter(t, t - 1))


@contextmanager
def torch_threads(n: int | None):
    """Run the block under ``n`` intra-op threads (None: as they are), then restore them."""
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(n or before)
        yield
    finally:
        torch.set_num_threads(before)


def comparable(summary: dict, also: tuple = ()) -> dict:
    """A summary.json without what differs between two runs of one computation: wall times, threads,
    shards, the measured peak memory, and model.exec's measurement (its chosen paths stay)."""
    s = {k: v for k, v in summary.items() if k not in ("wall_seconds", "ticks_per_second", "seconds_per_round",
                                                        "threads", "shards", "memory", *also)}
    if "execution" in s:
        s["execution"] = {k: s["execution"][k] for k in ("train", "eval")}
    return s


def run_of(cfg):
    """The validated run of a composed config (the boundary composition builds engines from)."""
    from vecgossip.config.load import load
    return load(cfg, []).first


def runs_of(cfg):
    """Every replica's validated run of a composed config."""
    from vecgossip.config.load import load
    return load(cfg, []).runs


class StopAt:
    """A checkpointer for a run loop that keeps the state at the first position >= ``at`` and
    stops the run there (``blob``: the state to resume from)."""

    def __init__(self, at: int) -> None:
        self.at, self.blob = at, None

    def step(self, pos, end, hist, wall, state_fn):
        import copy
        if pos >= self.at and self.blob is None:
            self.blob = copy.deepcopy(state_fn())
            hist.interrupted = True
        return hist.interrupted


def faults_of(cfg, n: int):
    """The fault draws a composed config's run makes (seeded as composition does), or None."""
    import numpy as np
    from omegaconf import OmegaConf

    from vecgossip.core.faults import FaultConfig, Faults
    fc = FaultConfig.model_validate(OmegaConf.to_container(cfg.faults, resolve=True))
    return Faults(fc, n, np.random.default_rng([int(cfg.seed), 3])) if fc.active else None


def kill_at_first_checkpoint(proc, run_dir, timeout: float = 300.0) -> None:
    """SIGKILL a CLI run (``proc``, a Popen) as soon as its first checkpoint is in ``run_dir``;
    fails if the run ended before it or finished before the kill (nothing would be tested)."""
    import signal
    import time
    deadline = time.time() + timeout
    while not (Path(run_dir) / "checkpoint.pt").exists():
        assert proc.poll() is None and time.time() < deadline, "the run ended before its first checkpoint"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert not (Path(run_dir) / "summary.json").exists(), "the run finished before the kill: nothing was tested"
