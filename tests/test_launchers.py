"""Cluster sweeps through Hydra's own launchers (vecgossip/conf/hydra/launcher/): the SLURM preset composes
with the plugin's schema, and the local submitit executor runs a 2-job sweep as separate processes
whose outputs equal the default launcher's."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from test_config import REPO

pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="pip install -e '.[test]' installs it")

TINY = ["+experiment=vc", "model=mlp", "nodes=6", "degree=3", "max_ticks=30", "early_stop=false", "progress=false"]


def cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vecgossip", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600, **kw)


def test_slurm_preset_composes():
    proc = cli("+experiment=table1", "hydra/launcher=slurm", "hydra.launcher.partition=gpu",
               "hydra.launcher.timeout_min=90", "--cfg", "hydra")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "_target_: hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher" in out
    for line in ("partition: gpu", "timeout_min: 90", "gpus_per_node: 1", "max_num_timeout: 3"):
        assert f"    {line}\n" in out, line


def test_local_submitit_sweep_runs_jobs_as_processes(tmp_path, data_root):
    env = {**os.environ, "VECGOSSIP_DATA": str(data_root)}
    sweep = tmp_path / "sweep"
    proc = cli("-m", *TINY, "seed=0,1", "hydra/launcher=local", f"hydra.sweep.dir={sweep}", env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (sweep / "0" / "summary.json").exists() and (sweep / "1" / "summary.json").exists()
    jobs = {p.name for p in (sweep / ".submitit").iterdir() if p.name.isdigit()}
    assert len(jobs) == 2 and str(os.getpid()) not in jobs            # two processes of their own
    plain = cli(*TINY, "seed=1", f"hydra.run.dir={tmp_path / 'plain'}", env=env)
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert (sweep / "1" / "metrics.csv").read_bytes() == (tmp_path / "plain" / "metrics.csv").read_bytes()
