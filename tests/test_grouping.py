"""Reports pool seeds only when every other option is equal (vecgossip/report/grouping.py): a sweep over
any option gives one cell per value, named in the table."""
from __future__ import annotations

import subprocess
import sys

from test_config import REPO
from vecgossip.report.grouping import splitting_options


def test_splitting_options_are_those_that_differ_inside_a_cell():
    base = {"seed": 0, "rho": 0.01, "optim": {"rho": 0.01, "lr": 0.1}, "method_name": "dfedsam",
            "data": {"root": "/a"}, "engine": {"gossip_steps": 1}}
    runs = [
        {**base, "seed": s, "rho": r, "optim": {"rho": r, "lr": 0.1}, "data": {"root": f"/r{s}"}}
        for r in (0.01, 0.05) for s in (0, 1)
    ]
    runs.append({**base, "method_name": "dfedavg", "engine": {"gossip_steps": 4}})   # its own cell
    cells = [("dfedsam",)] * 4 + [("dfedavg",)]
    # rho is named once (optim.rho: the group's name, not the top-level knob that mirrors it); the
    # seed and the data root never split; gossip_steps differs only between cells, so it does not
    assert splitting_options(runs, cells) == ["optim.rho"]
    old = {k: v for k, v in runs[0].items() if k != "engine"}                      # an older summary
    assert splitting_options([old, runs[1]], [("dfedsam",)] * 2) == []
    # a seed run on a GPU pools with the CPU's seeds (Table I at N = 50: seeds from both)
    assert splitting_options([{**runs[0], "device": "cpu"}, {**runs[1], "device": "cuda"}], [("dfedsam",)] * 2) == []


def test_an_option_a_summary_predates_is_its_default():
    """A summary written before clock.barrier existed ran under the global barrier (the option's
    default, from the run's method preset): it pools with a global-barrier run and splits from a
    per-node one, named by the option."""
    old = {"seed": 0, "method_name": "dpsgd", "clock": {"enabled": True, "policy": "fair"}}
    node = {"seed": 1, "method_name": "dpsgd", "clock": {"enabled": True, "policy": "fair", "barrier": "node"}}
    glob = {**node, "clock": {**node["clock"], "barrier": "global"}}
    assert splitting_options([old, node], [("dpsgd",)] * 2) == ["clock.barrier"]
    assert splitting_options([old, glob], [("dpsgd",)] * 2) == []


def test_report_of_a_rho_sweep_has_two_cells_of_two_seeds(tmp_path, data_root):
    sweep = tmp_path / "sweep"
    proc = subprocess.run(
        [sys.executable, "-m", "vecgossip", "-m", "method=dfedsam", "model=mlp", "data=mnist", "clients=4",
         "topology=ring", "rounds=1", "local_steps=1", "local_epochs=null", "data.batch_size=8",
         "data.global_test_size=40", "data.local_test_size=10", "rho=0.01,0.05", "seed=0,1",
         f"data_root={data_root}", "progress=false", f"hydra.sweep.dir={sweep}"],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    from vecgossip.report.tick import report
    res = report(sweep, tmp_path / "out")
    table = res["dfl_topology"]
    assert sorted(table.options) == ["optim.rho=0.01", "optim.rho=0.05"]
    assert table.seeds.tolist() == [2, 2]
    md = (tmp_path / "out" / "dfl_topology.md").read_text()
    assert "optim.rho=0.01" in md and "optim.rho=0.05" in md and md.count("(n=2)") == 2


def test_a_cpu_runs_tf32_pools_with_fp32_a_gpu_runs_does_not():
    """precision=tf32 (the default since issue 46) computes as fp32 on a CPU: the same cell as a
    summary written when fp32 was the default; on a GPU the two differ (TF32 tensor cores)."""
    from vecgossip.report.grouping import splitting_options
    cpu = [{"precision": "fp32", "device": "cpu", "seed": 0}, {"precision": "tf32", "device": "cpu", "seed": 1}]
    assert splitting_options(cpu, [("a",), ("a",)]) == []
    gpu = [{"precision": "fp32", "device": "cuda", "seed": 0}, {"precision": "tf32", "device": "cuda", "seed": 1}]
    assert splitting_options(gpu, [("a",), ("a",)]) == ["precision"]
