"""The benchmarks run end to end at tiny sizes (so they do not rot: DFL round, gpu_check in CPU mode,
compression, loop gossip, one client step), and the DFL round's loop side
computes what the engine computes: after one round both hold the same models."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

import torch

from test_config import REPO


@pytest.mark.slow   # ~20 s; the round benchmark's two sides by default: test_round_benchmark_sides_agree
def test_round_benchmark_smoke():
    proc = subprocess.run([sys.executable, "benchmarks/rounds.py", "--m", "3", "--batch", "4", "--reps", "1",
                           "--warmup", "1", "--methods", "dfedavgm", "dfedsam"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "speedup" in proc.stdout and "dfedsam" in proc.stdout and "batched_faults" in proc.stdout


def test_client_step_benchmark_smoke():
    proc = subprocess.run([sys.executable, "benchmarks/client_step.py", "--model", "cnn", "--batch", "4", "--reps", "1"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "vs_modules" in proc.stdout and "dfedsam" in proc.stdout and "contiguous_grads" in proc.stdout


def test_round_benchmark_sides_agree():
    sys.path.insert(0, str(REPO / "benchmarks"))
    import rounds as bench
    for method in ("dfedavgm", "dfedsam"):
        batched, loops, _, eng = bench.setup(3, "cnn", 4, 1, method)   # one step: float32 (test_rounds.py, CASES)
        batched()
        for name, looped in loops.items():
            looped()
            clients = looped.clients
            flat = torch.stack([torch.cat([p.reshape(-1) for p in net.parameters()]) for net in clients.nets])
            rel = (flat - eng.state.theta).norm(dim=1) / eng.state.theta.norm(dim=1)
            assert rel.max() < 1e-4, (method, name, rel)


@pytest.mark.slow   # the long GPU study at tiny sizes (~18 s); gpu_check.py, the first call on a device, stays in the default suite
def test_gpu_extended_cpu_mode_smoke():
    """gpu_extended.py (the long GPU study) runs end to end on the CPU at tiny sizes: its correctness lines say OK."""
    proc = subprocess.run([sys.executable, "benchmarks/gpu_extended.py", "--device", "cpu", "--n", "8", "--loop-n", "8",
                           "--check-n", "4", "--k", "4", "--reps", "1", "--comp-n", "8",
                           "--replicas", "2", "--replica-n", "6", "--replica-ticks", "20",
                           "--resnet-m", "3", "--resnet-batch", "2", "--roofline-n", "4", "--roofline-batch", "8",
                           "--scaling-n", "6", "8", "10", "--scaling-ticks", "11"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("(OK)") == 4 and "FAIL" not in proc.stdout and "comp/plain" in proc.stdout
    assert "batchnorm: ResNet-18 on cpu" in proc.stdout                  # section 8: BatchNorm, bf16
    assert "engine_ratio" in proc.stdout and "False" not in proc.stdout   # replica outputs equal sequential
    assert "hours_1000_rounds_K20" in proc.stdout                         # the ResNet-18 round ran
    assert "roofline: LeNet-5 step of 4 nodes" in proc.stdout and proc.stdout.count("conv backward") == 2   # section 9
    assert "model.exec=auto picks" in proc.stdout and "per_client_s" in proc.stdout        # section 7: both paths
    assert "Fitted exponents" in proc.stdout                              # section 10: the scaling sweep


@pytest.mark.slow   # ~24 s; the compression paths themselves are tested in test_compression*.py
def test_compression_benchmark_smoke():
    proc = subprocess.run([sys.executable, "benchmarks/compression.py", "--sizes", "8x4", "--reps", "1"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "slot_ratio" in proc.stdout and "dense_slot_ratio" in proc.stdout


@pytest.mark.slow   # ~30 s of gloo launches; tests/test_distributed.py checks the sharded runs themselves
def test_distributed_benchmark_smoke(tmp_path, data_root):
    """benchmarks/distributed.py launches G = 1 and 2 gloo ranks and reports seconds and bytes per
    tick; a ring's all_to_all moves fewer bytes than its all_gather (only neighbours' rows)."""
    import json
    import os
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, "benchmarks/distributed.py", "--nodes", "40", "--model", "mlp",
                           "--topology", "ring", "--ticks", "4", "--json", str(out)], cwd=REPO, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "VECGOSSIP_DATA": str(data_root)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {(r["G"], r["exchange"]): r for r in json.loads(out.read_text())}
    assert set(rows) == {(1, "-"), (2, "all_to_all"), (2, "all_gather")}
    assert all(r["s_per_tick"] > 0 for r in rows.values()) and rows[(1, "-")]["MB_in_per_tick"] == 0
    assert 0 < rows[(2, "all_to_all")]["MB_in_per_tick"] < rows[(2, "all_gather")]["MB_in_per_tick"]


@pytest.mark.slow   # a benchmark script's smoke run (a process start + tiny sizes); -m slow runs it
def test_roofline_benchmark_smoke():
    """benchmarks/roofline.py prints every phase of both sides with a rate against the calibration."""
    proc = subprocess.run([sys.executable, "benchmarks/roofline.py", "--n", "4", "--batch", "8", "--k", "2",
                           "--reps", "1"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert out.count("conv backward") == 2 and "% sgemm" in out and "% copy" in out and "evaluation" in out


@pytest.mark.slow   # a benchmark script's smoke run (a process start + tiny sizes); -m slow runs it
def test_floor_benchmark_smoke():
    """benchmarks/floor.py at tiny sizes: every conv candidate agrees with per-node F.conv2d and
    autograd (its twin lines say OK) and the bounds (with the state's and the conv outputs' DRAM passes)
    are printed for a training line and evaluation."""
    proc = subprocess.run([sys.executable, "benchmarks/floor.py", "--lines", "lenet8", "eval", "--n", "4",
                           "--reps", "1", "--conv-reps", "1"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("(OK)") == 4 and "FAIL" not in proc.stdout
    assert "bound_gemm" in proc.stdout and "share_floor" in proc.stdout
    assert "bound_state" in proc.stdout and "with the conv outputs" in proc.stdout


@pytest.mark.slow   # a benchmark script's smoke run (a process start + tiny sizes); -m slow runs it
def test_evaluation_benchmark_smoke():
    """benchmarks/evaluation.py: the shared-images and per-node-copy paths (checked equal inside),
    the module loop and the engine's metrics row, with their share of a training round."""
    proc = subprocess.run([sys.executable, "benchmarks/evaluation.py", "--n", "4", "--k", "2", "--images", "20",
                           "--chunks", "1", "3", "--reps", "1"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "shared c=3" in proc.stdout and "copies c=1" in proc.stdout and "share_of_round" in proc.stdout


@pytest.mark.slow   # a benchmark script's smoke run (a process start + tiny sizes); -m slow runs it
def test_conv_groups_benchmark_smoke():
    """benchmarks/conv_groups.py prints forward/backward per client for every layer and group count."""
    proc = subprocess.run([sys.executable, "benchmarks/conv_groups.py", "--batch", "4", "--groups", "1", "2",
                           "--reps", "1"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [ln.split() for ln in proc.stdout.splitlines() if ln.split() and ln.split()[0].count(".conv") == 1]
    assert {(ln[0], ln[1]) for ln in lines} == {(f"{m}.conv{i}", g) for m in ("cnn", "lenet") for i in (1, 2)
                                                  for g in ("1", "2")}
    assert all(float(ln[2]) > 0 and float(ln[3]) > 0 for ln in lines)


@pytest.mark.slow   # a benchmark script's smoke run (a process start + tiny sizes); -m slow runs it
def test_reproducible_benchmark_smoke():
    """benchmarks/reproducible.py: both MKL modes measured in fresh interpreters, the CNR mode's bits
    independent of the output address, and both dense mixing products timed."""
    proc = subprocess.run([sys.executable, "benchmarks/reproducible.py", "--reps", "1", "--p", "5000"], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = {ln.split()[0]: ln.split() for ln in proc.stdout.splitlines() if ln.split()}
    assert lines["AUTO"][-1] == "True" and "unset" in lines
    assert "panels_ms" in proc.stdout and {"7", "100"} <= set(lines)


def test_loop_gossip_benchmark_smoke():
    """benchmarks/loop_gossip.py times the three ways of x <- W x, which compute the same models."""
    proc = subprocess.run([sys.executable, "benchmarks/loop_gossip.py", "--m", "6", "--model", "mlp", "--reps", "1"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert all(v in proc.stdout for v in ("fresh", "kept", "engine", "minor_faults"))
    err = float(proc.stdout.rsplit("max abs difference", 1)[1])
    assert err < 1e-6


def fresh_pages() -> None:
    """Touch one byte of every page of a new anonymous 64 MB mapping: 16,384 minor faults a call
    whatever the allocator did before (a freed tensor's pages may be kept and reused by malloc)."""
    import mmap
    import numpy as np
    m = mmap.mmap(-1, 1 << 26)
    a = np.frombuffer(m, dtype=np.uint8)
    a[::4096] = 1
    del a
    m.close()


def test_interleaved_rotates_the_order_and_counts_page_faults():
    """rotate=True: repetition r starts at side r mod k, so every side follows every other equally
    often; each side's median call reports the minor page faults it took (a fresh 64 MB mapping
    each call maps in 16,384 pages; a kept buffer none)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from common import interleaved
    calls, kept = [], torch.zeros(1 << 24)
    fns = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b"), "c": lambda: calls.append("c")}
    interleaved(fns, reps=3, warmup=0, rotate=True)
    assert calls == list("abcbcacab")
    calls.clear()
    interleaved(fns, reps=2, warmup=0)
    assert calls == list("abcabc")
    t = interleaved({"fresh": fresh_pages, "kept": lambda: kept.fill_(1.0).sum()}, reps=3, warmup=1, rotate=True)
    if sys.platform.startswith("linux"):
        assert t["fresh"]["faults"] > 10000 and t["kept"]["faults"] < 100, t


@pytest.mark.slow   # a benchmark script's smoke run (a process start + tiny sizes); -m slow runs it
def test_warmup_faults_benchmark_smoke():
    proc = subprocess.run([sys.executable, "benchmarks/warmup_faults.py", "--model", "cnn", "--rounds", "2",
                           "--m", "3", "--batch", "4", "--fault-mb", "8"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("fixed order") == 3 and proc.stdout.count("rotated order") == 3
    assert "alone" in proc.stdout and "one minor fault here" in proc.stdout


def test_privacy_speed_benchmark_smoke():
    """benchmarks/privacy_speed.py (issue 38): the engine's plain and DP steps beside the
    per-client Opacus loop, one small row per model kind (linear only, convolutions)."""
    for model in ("mlp", "lenet"):
        proc = subprocess.run([sys.executable, "benchmarks/privacy_speed.py", "--model", model, "--clients", "2",
                               "--batch", "4", "--reps", "1"], cwd=REPO, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "opacus_over_dp" in proc.stdout and re.search(rf"\b{model}\s+2\s+4\s", proc.stdout), proc.stdout


def test_gpu_check_cuts_a_section_past_its_cap_and_the_others_still_land(tmp_path):
    """gpu_check.py (issue 46) on the CPU: each section in its own process under its own cap; a
    section that overruns (precision, capped at 0.5 s) is cut, one without its data (table1_vc: no
    MNIST) is skipped and says why, the sections after them still run and land in the JSONL as they
    finish; the log and the headline table are written."""
    import json
    import os
    out = tmp_path / "gc"
    empty = tmp_path / "no_data"
    empty.mkdir()
    proc = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--device", "cpu", "--small", "--out", str(out),
                           "--only", "env", "precision", "table1_vc", "correctness", "--cap", "precision=0.5"],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "VECGOSSIP_DATA": str(empty)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in (out / "gpu_check.jsonl").read_text().splitlines()]
    ends = [(r["section"], r["status"]) for r in rows if "status" in r]
    assert ends == [("env", "ok"), ("precision", "cut"), ("table1_vc", "skipped"), ("correctness", "ok")]
    checks = [r for r in rows if r["section"] == "correctness" and "check" in r]
    assert len(checks) == 2 and all(r["ok"] for r in checks)
    assert next(r for r in rows if r["section"] == "env" and "torch" in r)["torch"] == torch.__version__
    assert "no MNIST" in next(r["note"] for r in rows if r["section"] == "table1_vc" and "status" in r)
    table = (out / "gpu_check.md").read_text()
    assert "| precision | cut |" in table and "| correctness | ok |" in table
    log = (out / "gpu_check.log").read_text()
    assert "== precision: cut" in log and "[correctness]" in log
