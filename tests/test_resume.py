"""Exact resume through the real CLI: a run killed (SIGKILL) or stopped (SIGTERM) at a random point
and started again with the same command ends with the same metrics.csv, accuracy.npy and
summary.json (wall time aside) as the uninterrupted run, byte for byte, on both engines."""
from __future__ import annotations

import io
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch

from conftest import comparable
from test_config import REPO

RUNS = {
    "tick": ["+experiment=vc", "model=mlp", "nodes=8", "degree=4", "max_ticks=4500", "early_stop=false",
             "checkpoint_every=50"],
    "tick_clock": ["+experiment=vc", "model=mlp", "nodes=8", "degree=4", "max_ticks=4500", "early_stop=false",
                   "checkpoint_every=50", "clock.enabled=true", "clock.compute.model=lognormal",
                   "clock.compute.seconds=10", "clock.compute.sigma=0.1", "clock.links.uplink=2",
                   "clock.links.latency=0.5"],         # in seconds: checkpoints taken with messages in flight
    "rounds": ["method=dfedavgm", "model=mlp", "clients=6", "topology=ring", "rounds=120", "local_steps=5",
               "local_epochs=null", "eval_every=4", "data.global_test_size=100", "alpha=0.5", "checkpoint_every=2",
               "clock.enabled=true", "clock.compute.model=stragglers", "clock.links.uplink=30"],   # virtual seconds too
}
RUNS["rounds_node"] = [*RUNS["rounds"], "clock.barrier=node"]   # per-node barriers: rounds in flight at a checkpoint
WALL = {"wall_seconds", "ticks_per_second", "seconds_per_round"}


def cli(args, out, data_root):
    cmd = [sys.executable, "-m", "vecgossip", *args, f"hydra.run.dir={out}", f"data_root={data_root}", "progress=false"]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "MPLBACKEND": "Agg"})


def finish(proc) -> subprocess.CompletedProcess:
    out, err = proc.communicate(timeout=600)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def outputs(d) -> tuple[bytes, bytes, dict]:
    s = comparable(json.loads((d / "summary.json").read_text()), tuple(WALL))
    npy = "ticks.npy" if (d / "ticks.npy").exists() else "rounds.npy"
    return (d / "metrics.csv").read_bytes(), (d / "accuracy.npy").read_bytes() + (d / npy).read_bytes(), s


@pytest.mark.parametrize("engine,sig", [          # each engine and each signal once by default; all four with -m slow
    pytest.param("tick", signal.SIGKILL, id="tick-sigkill", marks=pytest.mark.slow),   # kill -9 on both engines by
    # default: tests/test_clock_messages.py (a user's algorithm in seconds) and the examples' resume tests
    pytest.param("rounds_node", signal.SIGTERM, id="rounds-node-sigterm"),
    pytest.param("tick_clock", signal.SIGTERM, id="tick-clock-sigterm", marks=pytest.mark.slow),
    pytest.param("rounds", signal.SIGKILL, id="rounds-sigkill", marks=pytest.mark.slow),
    pytest.param("rounds", signal.SIGTERM, id="rounds-sigterm", marks=pytest.mark.slow),
])
def test_interrupted_run_resumes_to_identical_outputs(data_root, tmp_path, engine, sig):
    args = RUNS[engine]
    ref = finish(cli(args, tmp_path / "ref", data_root))
    assert ref.returncode == 0, ref.stderr[-2000:]

    run = tmp_path / "run"
    proc = cli(args, run, data_root)
    deadline = time.time() + 300
    while not (run / "checkpoint.pt").exists():                       # the first checkpoint is there
        assert proc.poll() is None and time.time() < deadline, "run ended before its first checkpoint"
        time.sleep(0.05)
    time.sleep(random.uniform(0.0, 1.0))   # then a random point in the first ~third of the run (~3 s of engine
                                           # time): a signal after the engine ends lets the outputs finish
    proc.send_signal(sig)
    first = finish(proc)
    assert not (run / "summary.json").exists(), "the run finished before the signal: nothing was tested"
    assert (run / "checkpoint.pt").exists()
    if sig == signal.SIGTERM:
        assert first.returncode == 130 and "interrupted at" in first.stderr and "Traceback" not in first.stderr
    else:
        assert first.returncode == -signal.SIGKILL

    again = finish(cli(args, run, data_root))                          # the same command again
    assert again.returncode == 0, again.stderr[-2000:]
    assert not (run / "checkpoint.pt").exists()                       # removed once complete
    got, want = outputs(run), outputs(tmp_path / "ref")
    assert got[0] == want[0] and got[1] == want[1]
    assert got[2] == want[2]

    rerun = finish(cli(args, run, data_root))                          # complete: not run again
    assert rerun.returncode == 0 and "complete already" in rerun.stdout


def test_resume_refuses_a_checkpoint_of_another_config(data_root, tmp_path):
    run = tmp_path / "run"
    proc = cli(RUNS["tick"], run, data_root)
    while not (run / "checkpoint.pt").exists():
        assert proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    finish(proc)
    other = finish(cli([*RUNS["tick"], "nodes=10"], run, data_root))
    assert other.returncode == 2
    assert "was written by a different config; it differs in nodes (8 there, 10 here), topology.n" in other.stderr


def test_rerunning_a_sweep_skips_finished_jobs_and_reruns_the_rest(data_root, tmp_path):
    sweep = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "vecgossip", "-m", "+experiment=vc", "model=mlp", "nodes=6", "degree=3",
           "max_ticks=30", "seed=0,1", f"data_root={data_root}", "progress=false", f"hydra.sweep.dir={sweep}"]
    first = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    done = (sweep / "0" / "summary.json").read_bytes()
    (sweep / "1" / "summary.json").unlink()                          # as if job 1 had not finished
    again = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.count("complete already") == 1               # job 0 skipped ...
    assert (sweep / "0" / "summary.json").read_bytes() == done
    assert (sweep / "1" / "summary.json").exists()                   # ... job 1 run again


class StopAt:
    """A checkpointer that captures the state (through torch.save, as on disk) at tick ``at`` and stops."""

    def __init__(self, at: int):
        self.at, self.saved = at, None

    def step(self, pos, end, hist, wall, state_fn):
        if pos < self.at:
            return False
        blob = io.BytesIO()
        torch.save(state_fn(), blob)
        blob.seek(0)
        self.saved = torch.load(blob, weights_only=False)
        return True


def test_resume_with_models_waiting_in_buffers():
    """Asynchronous ticks, R = 4 and compressed sends: buffers hold models between ticks, so the
    checkpoint's sparse buffer rows are exercised; the resumed engine ends bitwise where the
    uninterrupted one does."""

    from test_guard import guarded_engine as tick_engine

    def engine():
        return tick_engine("stop", t_acq=(1, 5), compression=0.3, max_ticks=120, R=4)
    ref = engine()
    ref_hist = ref.run(progress=False)
    first = engine()
    cut = StopAt(45)
    first.run(progress=False, checkpointer=cut)
    assert int((first.buffers.count > 0).sum()) > 0            # models were waiting at the cut
    rows = cut.saved["engines"][0]["buffers"][0]
    assert 0 < rows.numel() < first.state.n
    second = engine()
    hist = second.run(progress=False, resume=cut.saved)
    assert torch.equal(second.state.theta, ref.state.theta) and torch.equal(second.buffers.total, ref.buffers.total)
    assert hist.rows == ref_hist.rows


def test_a_resumed_run_releases_the_checkpoints_tensors():
    """The loaded checkpoint is consumed: once its tensors are copied into the engine nothing keeps
    them, so a resumed run does not hold a second copy of the state for the rest of the run
    (results/resume_memory_cpu/: 6.07 GB resident against 3.5 GB at N = 500 before)."""
    import gc
    import weakref

    from test_guard import guarded_engine as tick_engine

    def engine():
        eng = tick_engine("stop", t_acq=(1, 5), max_ticks=40, R=4)
        return eng
    cut = StopAt(20)
    engine().run(progress=False, checkpointer=cut)
    blob = cut.saved
    gone = [weakref.ref(blob["theta"]), weakref.ref(blob["momentum"]),
            weakref.ref(blob["engines"][0]["buffers"][1])]          # the buffer sums' rows
    second = engine()
    kept = []
    hist = second.run(progress=False, resume=blob,
                      on_eval=lambda h: kept.append([w() is None for w in gone]) if not kept else None)
    gc.collect()
    assert kept and all(kept[0]), kept          # already released at the first evaluation after resuming
    assert hist.ticks_run == 40 and blob == {}


def test_timed_checkpoints_take_at_most_their_share(tmp_path, monkeypatch):
    """Checkpointer: every ``seconds`` of wall time, but never sooner than write time / MAX_SHARE
    after the last write (a slow disk makes checkpoints rarer, not the run slower); signals and
    ``every`` are not spaced out."""
    from vecgossip.runtime import checkpoint
    clock = [1000.0]
    monkeypatch.setattr(checkpoint.time, "monotonic", lambda: clock[0])

    def slow_save(path, payload):                      # a write that takes 12 s
        clock[0] += 12.0
    monkeypatch.setattr(checkpoint, "save", slow_save)
    ck = checkpoint.Checkpointer(tmp_path, None, 300.0, {})
    clock[0] += 300.0
    ck(1, dict)
    assert ck.written == 1 and ck.write_seconds == 12.0
    clock[0] += 300.0                                  # 300 s later: 12 s would be 4% of it
    ck(2, dict)
    assert ck.written == 1
    clock[0] += 12.0 / checkpoint.MAX_SHARE - 300.0    # 600 s after the last write: 2%
    ck(3, dict)
    assert ck.written == 2
    ck.request()                                       # a signal writes at once
    ck(4, dict)
    assert ck.written == 3
    every = checkpoint.Checkpointer(tmp_path, 5, 300.0, {})
    every.write_seconds = 1e9
    every(5, dict)
    assert every.written == 1


def test_a_signal_while_outputs_are_written_lets_them_finish(data_root, tmp_path, monkeypatch, capsys):
    """SIGTERM arriving after the last tick, while the outputs are written: the handler is still
    installed, so the writing completes (summary.json last, checkpoint removed) and says so."""
    from test_config import make
    from vecgossip.composition import tick as tick_setup
    from vecgossip.composition.root import run
    write = tick_setup.write_outputs

    def interrupted_write(*args, **kw):
        os.kill(os.getpid(), signal.SIGTERM)          # lands in the middle of writing
        return write(*args, **kw)
    monkeypatch.setattr(tick_setup, "write_outputs", interrupted_write)
    cfg = make(["+experiment=vc", "model=mlp", "nodes=6", "degree=3", "max_ticks=60", "early_stop=false",
                "checkpoint_every=20", f"data_root={data_root}", "progress=false"])
    summary = run(cfg, tmp_path)
    assert summary["_stop"]                           # the CLI exits 130 there: a sweep runs no further job
    assert (tmp_path / "summary.json").exists() and (tmp_path / "metrics.csv").exists()
    assert not (tmp_path / "checkpoint.pt").exists()
    assert "a stop signal came while the outputs were written" in capsys.readouterr().err


def _without(d, key: str):
    """``d`` (nested dicts and lists) with every entry ``key`` removed: a checkpoint from before it existed."""
    if isinstance(d, dict):
        return {k: _without(v, key) for k, v in d.items() if k != key}
    return [_without(v, key) for v in d] if isinstance(d, list) else d


def test_a_checkpoint_from_before_model_exec_resumes_on_the_batched_path():
    """Checkpoints written before ``model.exec`` existed (no engine-state "execution") ran the
    batched path: they resume on it, whatever path this run's forward was set to, and end bitwise
    where the uninterrupted batched run does (issue 25's N = 1000 cells, checkpointed by an
    earlier commit, resumed this way)."""

    from vecgossip.models.execution import ExecForward, per_client_forward
    from vecgossip.models import build as build_model, make_forward

    from test_guard import guarded_engine as tick_engine

    def engine(mode: str):
        eng = tick_engine("stop", t_acq=(1, 5), max_ticks=40, R=2)
        eng.use_forward(ExecForward(make_forward("mlp"), per_client_forward(build_model("mlp").to("meta")),
                                    mode, mode))
        return eng
    ref = engine("batched")
    ref_hist = ref.run(progress=False)
    cut = StopAt(20)
    engine("batched").run(progress=False, checkpointer=cut)
    old = _without(cut.saved, "execution")
    assert "execution" in str(list(cut.saved["engines"][0])) and "execution" not in str(list(old["engines"][0]))
    second = engine("per_client")                                  # as if auto had measured per_client here
    hist = second.run(progress=False, resume=old)
    assert second.forward.train_mode == second.forward.eval_mode == "batched"
    assert second.execution.train == "batched" and second.execution.how == "checkpoint from before model.exec"
    assert torch.equal(second.state.theta, ref.state.theta) and hist.rows == ref_hist.rows


def test_resume_fingerprint_fills_options_a_checkpoint_predates(tmp_path):
    """A checkpoint without ``model.exec`` counts as ``batched``; ``model.exec=auto`` here takes
    the run's own decision, so it matches any value there; another explicit value does not."""
    from vecgossip.runtime import checkpoint
    from vecgossip.api import compose
    from vecgossip.core.errors import ConfigError

    from omegaconf import OmegaConf

    def compose_(overrides):       # the resolved config, as the run keys its checkpoint
        return OmegaConf.to_container(compose(overrides=overrides), resolve=True)
    base = ["model=mlp", "nodes=8", "degree=4"]
    fp = checkpoint.fingerprint(compose_(base))
    assert fp["model.exec"] == "auto"
    path = tmp_path / "checkpoint.pt"
    checkpoint.save(path, {"version": checkpoint.VERSION, "meta": {"fingerprint": {k: v for k, v in fp.items()
                                                                                   if k != "model.exec"}},
                           "pos": 0, "engine": {}})
    for ok in ("auto", "batched"):
        checkpoint.load_resume(compose_([*base, f"model.exec={ok}"]), path)
    with pytest.raises(ConfigError, match=r"differs in model.exec \('batched' there, 'per_client' here\)"):
        checkpoint.load_resume(compose_([*base, "model.exec=per_client"]), path)
    checkpoint.save(path, {"version": checkpoint.VERSION, "meta": {"fingerprint": {**fp, "model.exec": "per_client"}},
                           "pos": 0, "engine": {}})
    checkpoint.load_resume(compose_([*base, "model.exec=auto"]), path)
    with pytest.raises(ConfigError, match=r"model.exec \('per_client' there, 'batched' here\)"):
        checkpoint.load_resume(compose_([*base, "model.exec=batched"]), path)


def _mapped_rss_kb(path) -> int:
    """Resident kB of this process's mappings of ``path`` (/proc/self/smaps)."""
    total, inside, name = 0, False, str(path.resolve())
    for line in open("/proc/self/smaps"):
        head = line.split()
        if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
            inside = len(head) >= 6 and line.rstrip("\n").endswith(name)
        elif inside and head[0] == "Rss:":
            total += int(head[1])
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps and madvise are Linux's")
def test_copy_in_copies_exactly_and_hands_back_the_checkpoints_pages(tmp_path, monkeypatch):
    """checkpoint.copy_in: the same values as copy_ / index assignment, block by block, and the
    memory-mapped checkpoint's pages leave the resident set as they are copied (a resumed run
    then holds its state plus one block, not plus the checkpoint)."""
    import ctypes

    from vecgossip.runtime import checkpoint
    monkeypatch.setattr(checkpoint, "CHUNK_BYTES", 256 << 10)
    g = torch.Generator().manual_seed(0)
    theta, total = torch.randn(256, 8192, generator=g), torch.randn(40, 8192, generator=g)   # 8 MB, 1.3 MB
    path = tmp_path / "checkpoint.pt"
    checkpoint.save(path, {"meta": {}, "pos": 0, "engine": {"theta": theta, "total": total}})
    blob = checkpoint.load(path)["engine"]
    libc = ctypes.CDLL(None, use_errno=True)
    probe = blob["theta"][:1]
    if libc.madvise(ctypes.c_void_p(probe.data_ptr() // 4096 * 4096), ctypes.c_size_t(4096), ctypes.c_int(21)) != 0:
        pytest.skip(f"this kernel has no MADV_PAGEOUT (errno {ctypes.get_errno()})")
    assert blob["theta"].sum().item() == pytest.approx(theta.sum().item())           # every page touched
    before = _mapped_rss_kb(path)
    assert before >= 8000
    dst = torch.zeros_like(theta)
    checkpoint.copy_in(dst, blob["theta"])
    assert torch.equal(dst, theta)
    assert _mapped_rss_kb(path) < before - 7000           # the copied 8 MB left the resident set
    rows = torch.randperm(256, generator=g)[:40]
    dst2, want = torch.zeros_like(theta), torch.zeros_like(theta)
    want[rows] = total
    checkpoint.copy_in(dst2, blob["total"], rows)
    assert torch.equal(dst2, want)
    anon = torch.randn(64, 8192, generator=g)             # not the checkpoint's: left alone
    keep = anon.clone()
    checkpoint.release(anon)
    assert torch.equal(anon, keep)


def test_the_printed_command_continues_a_run_in_its_default_folder(data_root, tmp_path):
    """Issue 39: with Hydra's default timestamped folder, the command printed on SIGTERM continues
    the run in that folder (not a new run beside it): the same command line + hydra.run.dir=<it>."""
    cmd = [sys.executable, "-m", "vecgossip", *RUNS["rounds"], f"data_root={data_root}", "progress=false"]
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 300
    while not list(tmp_path.glob("outputs/*/*/checkpoint.pt")):
        assert proc.poll() is None and time.time() < deadline, "run ended before its first checkpoint"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    first = finish(proc)
    assert first.returncode == 130, first.stderr[-2000:]
    (folder,) = tmp_path.glob("outputs/*/*")
    line = first.stderr.strip().splitlines()[-1]
    assert "to continue: python -m vecgossip " in line and f"hydra.run.dir={folder}" in line
    import shlex
    again = shlex.split(line.split("to continue: ", 1)[1])
    assert again[:3] == ["python", "-m", "vecgossip"]
    done = subprocess.run([sys.executable, *again[1:]], cwd=tmp_path, capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert list(tmp_path.glob("outputs/*/*")) == [folder] and (folder / "summary.json").exists()
    import re
    assert re.search(rf"continuing from round [1-9]\d* \(the checkpoint in {re.escape(str(folder))}\)",
                     done.stderr)                                               # resumed, not started again, where


def test_sigterm_stops_an_api_run_with_one_line(data_root, tmp_path):
    """Issue 39: SIGTERM to a script calling vecgossip.run ends it within seconds, the state
    checkpointed, with one line that says how to continue (no traceback: Interrupted is a
    SystemExit, as the signal asked the process to end)."""
    script = ("import vecgossip\n"
              f"vecgossip.run('dfedavg', run_dir={str(tmp_path / 'run')!r}, progress=True, overrides=['data=mnist', "
              f"'model=mlp', 'clients=8', 'topology=ring', 'rounds=100000', 'local_steps=5', 'local_epochs=null', "
              f"'data_root={data_root}'])\n")
    err_file = tmp_path / "stderr.txt"
    with open(err_file, "w") as err_out:
        proc = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path, stdout=subprocess.DEVNULL,
                                stderr=err_out, env={**os.environ, "OMP_NUM_THREADS": "1"})
        deadline = time.time() + 240
        while "round" not in err_file.read_text() and time.time() < deadline:
            time.sleep(0.2)                               # the progress bar: the run loop has started
        time.sleep(1)
        sent = time.time()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    took = time.time() - sent
    err = err_file.read_text()
    lines = [ln for ln in err.replace("\r", "\n").splitlines() if ln.startswith("vecgossip:") or "Traceback" in ln]
    assert proc.returncode == 1 and "Traceback" not in err, err[-2000:]
    assert lines and lines[-1].startswith("vecgossip: interrupted at") and f"run_dir='{tmp_path / 'run'}'" in lines[-1]
    assert (tmp_path / "run" / "checkpoint.pt").exists() and took < 30, took


def test_one_ctrl_c_stops_a_sweep_within_seconds(data_root, tmp_path):
    """Issue 39: one SIGINT (Ctrl-C) during a multirun's first job stops the sweep: that job is
    checkpointed, no later job is started, exit 130 within seconds, and the last line gives the
    command that continues the sweep in its folder."""
    sweep = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "vecgossip", "-m", *RUNS["tick"], "seed=0,1,2", f"data_root={data_root}",
           "progress=false", f"hydra.sweep.dir={sweep}"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "MPLBACKEND": "Agg"})
    deadline = time.time() + 300
    while not (sweep / "0" / "checkpoint.pt").exists():
        assert proc.poll() is None and time.time() < deadline, "job 0 ended before its first checkpoint"
        time.sleep(0.05)
    sent = time.time()
    proc.send_signal(signal.SIGINT)
    done = finish(proc)
    took = time.time() - sent
    assert done.returncode == 130 and took < 30, (done.returncode, took, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert not (sweep / "1").exists() and not (sweep / "2").exists()          # the sweep stopped there
    assert not (sweep / "0" / "summary.json").exists() and (sweep / "0" / "checkpoint.pt").exists()
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("vecgossip: interrupted at") and f"hydra.sweep.dir={sweep}" in last, last
