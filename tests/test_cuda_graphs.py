"""engine.cuda_graphs (issue 46, vecgossip/engines/tick/graphs.py): a synchronous tick's device work
captured once and replayed.

On a CPU: the captured work is capture-safe, counted with the GPU's paths forced (no host sync, no
upload, the same ops on the same shapes tick after tick), and the clock's replay bookkeeping (the
schedule, the guard's watch, the buffers' host counts) gives the run an uninterrupted eager run
gives, with an eager stand-in for the graph. On a GPU: the captured and the eager ticks agree bit
for bit (runs where a device is lent)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import vecgossip
from conftest import run_of
from vecgossip.composition import tick as setup
from vecgossip.core.device import force_gpu_paths
from vecgossip.core.errors import ConfigError
from vecgossip.engines.group import Group
from vecgossip.engines.tick import graphs
from vecgossip.engines.tick.clock import TickClock
from vecgossip.runtime.launches import count

BASE = ["method=vc", "model=mlp", "nodes=12", "degree=4", "t_acq=10", "max_ticks=60", "eval_every=20",
        "progress=false", "engine.guard_every=20"]


def engine(data_root, extra=()):
    cfg = vecgossip.compose(overrides=[*BASE, f"data_root={data_root}", *extra])
    return setup.build_engine(run_of(cfg))


class EagerGraph:
    """A stand-in for a CUDA graph: "capturing" runs nothing, each replay runs the work."""

    def __init__(self, fn, generators) -> None:
        self.fn, self.replays = fn, 0

    def replay(self) -> None:
        self.fn()
        self.replays += 1


def test_the_captured_work_is_capture_safe(data_root):
    """The device work of a synchronous VC tick, counted as a GPU runs it: no sync, no upload (a graph
    would replay the host buffer of its capture), and two ticks launch the same ops on the same
    shapes (static: what capture needs)."""
    with force_gpu_paths():
        e = engine(data_root)
        group = Group([e])
        clock = TickClock(group)
        assert group.watch is not None                     # guard_every 20: read at its own ticks
        cap = graphs.CapturedTick(e, group)
        assert graphs.why_not(e, group) is None
        assert cap.tick(0) and cap.tick(10)                 # eager warm-up ticks (every node acts)
        seqs = []
        for t in (20, 30):
            e.schedule.due(t)
            cap._t = t
            _, c = count(cap.device_work, shapes=True)
            e.schedule.reschedule(np.arange(e.n))
            assert c.syncs == 0 and not c.uploads, (c.sites, c.uploads)
            seqs.append(c.sequence)
        assert seqs[0] == seqs[1] and len(seqs[0]) > 50
        del clock


def test_replays_give_the_eager_run(data_root):
    """The clock with a captured tick (an eager stand-in replayed) ends where the plain clock does:
    the same models, buffers and metrics rows; the graph replayed every tick after the warm-up."""
    ref = engine(data_root)
    ref_hist = ref.run(progress=False)
    e = engine(data_root)
    group = Group([e])
    clock = TickClock(group)
    clock.captured = graphs.CapturedTick(e, group, factory=EagerGraph)
    from vecgossip.engines.loop import run_loop
    hist = run_loop(group, clock, progress=False)
    assert torch.equal(e.state.theta, ref.state.theta) and torch.equal(e.state.momentum, ref.state.momentum)
    assert hist.rows == ref_hist.rows
    cap = clock.captured
    assert cap.eager == graphs.WARM and cap.graph.replays == 60 // 10 - graphs.WARM
    assert e.graphs_note["captured"] is True


def test_what_cannot_be_captured_is_said(data_root):
    e = engine(data_root, ["t_acq=[1,19]"])
    assert "drawn" in graphs.why_not(e, Group([e]))
    e = engine(data_root, ["method=tl_compression"])
    group = Group([e])
    TickClock(group)
    assert "compression" in graphs.why_not(e, group)
    e = engine(data_root, ["engine.guard_every=1"])
    group = Group([e])
    TickClock(group)
    assert "guard" in graphs.why_not(e, group)
    res = vecgossip.run(overrides=[*BASE, f"data_root={data_root}", "max_ticks=10"])
    assert res.summary["cuda_graphs"] == {"mode": "auto", "captured": False, "why_not": "a CPU runs no CUDA graph"}
    with pytest.raises(ConfigError, match="engine.cuda_graphs=on needs device=cuda"):
        vecgossip.compose(overrides=[*BASE, "engine.cuda_graphs=on"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (run on a lent device)")
def test_captured_and_eager_ticks_agree_bit_for_bit_on_a_gpu(data_root):
    """On a GPU: a VC run with its ticks captured and replayed equals the eager run bit for bit."""
    over = [f"data_root={data_root}", "device=cuda", "precision=fp32", "deterministic=true"]
    eager = vecgossip.run(overrides=[*BASE, *over, "engine.cuda_graphs=off", "save_models=true"])
    graphed = vecgossip.run(overrides=[*BASE, *over, "engine.cuda_graphs=on", "save_models=true"])
    assert graphed.summary["cuda_graphs"]["captured"] is True
    a = torch.load(eager.run_dir / "models.pt", weights_only=False)["theta"]
    b = torch.load(graphed.run_dir / "models.pt", weights_only=False)["theta"]
    assert torch.equal(a, b)
    assert (eager.run_dir / "metrics.csv").read_bytes() == (graphed.run_dir / "metrics.csv").read_bytes()
