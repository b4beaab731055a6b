"""`pip install .` (not editable) gives a package that starts from any folder: the configs ship
inside the wheel (vecgossip/conf/), the entry point lists the groups and runs a short job."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from test_config import REPO
from venvs import packages_of_this_interpreter


def test_the_test_venv_sees_this_interpreters_packages(tmp_path):
    """The helper works from a venv as from a base interpreter: a venv made from inside a venv (as a
    user's) imports torch through it, and its sys.prefix is its own."""
    outer = packages_of_this_interpreter(tmp_path / "outer")
    got = subprocess.run([str(outer), "-c", "import sys, torch; print(sys.prefix)"], capture_output=True, text=True,
                         timeout=120, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, cwd=tmp_path)
    assert got.returncode == 0 and got.stdout.strip() == str(tmp_path / "outer"), got.stdout + got.stderr
    inner = subprocess.run([str(outer), "-c", "import sys; sys.path.insert(0, %r); import venvs; "
                            "from pathlib import Path; print(venvs.packages_of_this_interpreter(Path(%r)))"
                            % (str(Path(__file__).parent), str(tmp_path / "inner"))],
                           capture_output=True, text=True, timeout=300, cwd=Path(__file__).parent)
    assert inner.returncode == 0, inner.stderr[-2000:]
    torch_there = subprocess.run([inner.stdout.strip().splitlines()[-1], "-c", "import torch, numpy; print(torch.__version__)"],
                                 capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert torch_there.returncode == 0 and torch_there.stdout.startswith("2."), torch_there.stderr[-2000:]


def test_wheel_installs_and_runs_from_another_folder(tmp_path, data_root):
    wheels = tmp_path / "wheels"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation",
                            "-q", "-w", str(wheels)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-2000:]
    wheel = next(wheels.glob("vecgossip-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "vecgossip/conf/config.yaml" in names and "vecgossip/conf/method/vc.yaml" in names
    assert "vecgossip/conf/hydra/launcher/slurm.yaml" in names
    env_dir = tmp_path / "venv"
    py = packages_of_this_interpreter(env_dir)
    inst = subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "-q", str(wheel)],
                          capture_output=True, text=True, timeout=600)
    assert inst.returncode == 0, inst.stderr[-2000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}    # the wheel alone, not a checkout
    where = subprocess.run([str(py), "-c", "import vecgossip; print(vecgossip.__file__)"], cwd=elsewhere, env=clean,
                           capture_output=True, text=True, timeout=120)
    assert str(env_dir) in where.stdout, where.stdout + where.stderr          # the wheel, not the checkout
    helped = subprocess.run([str(py), "-m", "vecgossip", "--help"], cwd=elsewhere, env=clean, capture_output=True, text=True,
                            timeout=120)
    assert helped.returncode == 0 and "adpsgd, balance, choco, clipped_gossip, compression, dfedavg" in helped.stdout, helped.stderr[-1000:]
    assert "--hydra-help" in helped.stdout and "-m" in helped.stdout
    ran = subprocess.run([str(py), "-m", "vecgossip", "method=vc", "nodes=8", "degree=4", "max_ticks=20",
                          f"data_root={data_root}", "progress=false", "hydra.run.dir=run"], cwd=elsewhere, env=clean,
                         capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert (elsewhere / "run" / "summary.json").exists() and "ticks=20" in ran.stdout


def test_a_users_preset_folder_on_the_search_path_runs_alone(tmp_path, data_root):
    """`hydra.searchpath=[file:///my/conf] +experiment=mine`: the precheck composes with the same
    search path as the run (it used to say "Could not find 'experiment/mine'")."""
    conf = tmp_path / "myconf" / "experiment"
    conf.mkdir(parents=True)
    (conf / "mine.yaml").write_text("# @package _global_\nname: mine\nmethod_name: vc\nnodes: 6\ndegree: 3\n"
                                    "max_ticks: 20\nbeta: 0.0\ncorrection: true\nmodel:\n  name: mlp\n")
    proc = subprocess.run([sys.executable, "-m", "vecgossip", f"hydra.searchpath=[file://{tmp_path / 'myconf'}]",
                           "+experiment=mine", f"data_root={data_root}", "progress=false",
                           f"hydra.run.dir={tmp_path / 'run'}"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "mine: first_reach" in proc.stdout and "ticks=20" in proc.stdout
    bad = subprocess.run([sys.executable, "-m", "vecgossip", "+experiment=mine", f"hydra.run.dir={tmp_path / 'x'}"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "experiment=mine is unknown" in bad.stderr and not (tmp_path / "x").exists()
