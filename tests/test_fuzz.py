"""Bad input through the real CLI: every one of these configs stops with one line on stderr naming
the option, exit code 2, no traceback, before anything is written (no run directory) and before
anything large is allocated (each child's peak memory stays that of an idle interpreter)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from test_config import REPO

BAD = [
    ("nodez=5", "nodez"),                                       # unknown key
    ("method=dfedprox", "method=dfedprox is unknown"),          # unknown group options
    ("topology=torus", "topology=torus is unknown"),
    ("data=svhn", "data=svhn is unknown"),
    ("model=resnet", "model=resnet is unknown (did you mean resnet18?)"),
    ("nodes=abc", "topology.n (nodes) must be an integer, got 'abc'"),
    ("nodes=1", "topology.n (nodes)"),
    ("degree=50", "topology.k (degree)"),
    ("nodes=9 degree=3", "topology.n (nodes) x topology.k (degree) must be even"),
    ("nodes=51 degree=7", "topology.n (nodes) x topology.k (degree) must be even for a k-regular graph (every edge has two ends), got 51 x 7 = 357"),
    ("topology=ring degree=4", "degree has no effect with topology=ring"),
    ("beta=1.5", "algorithm.beta (beta) must be in [0, 1], got 1.5"),
    ("R=0", "algorithm.R (R) must be an integer >= 1, got 0"),
    ("t_acq=0", "t_acq"),
    ("t_acq=[19,1]", "t_acq"),
    ("alpha=-1", "data.alpha"),
    ("alpha=nan", "data.alpha"),
    ("alpha=inf", "data.alpha"),
    ("early_stop=no", "engine.early_stop (early_stop) must be true or false, got 'no'"),
    ("correction=maybe", "algorithm.correction (correction) must be true or false, got 'maybe'"),
    ("correction=1", "algorithm.correction (correction) must be true or false, got 1"),     # OmegaConf would convert it: refused as typed
    ("optim.lr=-0.1", "optim.lr"),
    ("optim.lr=nan", "optim.lr"),
    ("optim.gamma=-1", "optim.gamma"),
    ("optim.power=inf", "optim.power"),
    ("optim.momentum=1.0", "optim.momentum must be a number in [0, 1), got 1.0"),
    ("tl=true engine.tl.add_at=0.1", "engine.tl.add_at (0.1) must be above engine.tl.drop_at"),
    ("engine.most_frac=1.0", "engine.most_frac"),
    ("method=fedavg_tick tl=true", "tl has no effect with algorithm vecgossip.algorithms.fedavg_tick.FedAvgTick"),
    ("method=fedavg_tick compression=0.2", "compression has no effect with algorithm vecgossip.algorithms.fedavg_tick"),
    ("method=dfedavg beta=0.3", "beta has no effect with algorithm vecgossip.algorithms.dfedavg.DFedAvg"),
    ("method=fedavg_tick R=2", "its hyperparameters are algorithm.beta (beta), algorithm.correction (correction)"),
    ("+model.widht=3", "unknown option model.widht"),                 # a key no schema has
    ("algorithm._target_=nopkg.Algo", "algorithm._target_=nopkg.Algo cannot be imported"),
    ("device=tpu", "device='tpu' is unknown"),
    ("device=cuda:7", "device=cuda:7"),
    ("compression=0", "algorithm.compression (compression) must be a probability in (0, 1]"),
    ("max_ticks=0", "engine.max_ticks"),
    ("nodes=100000", "the run needs about"),                     # does not fit: refused with the numbers
    ("method=dfedavg clients=13 topology=grid", "13 fits no such grid"),
    ("method=dfedsam rho=-1", "optim.rho (rho)"),
    ("method=dfedsam_mgs gossip_steps=0", "engine.gossip_steps (gossip_steps)"),
    ("method=fedavg participation=0", "engine.participation"),
    ("method=dfedavg partition=iid alpha=0.3", "has no effect with data.partition (partition)=iid"),
    ("method=dfedavg clients=60001 topology=ring", "more than the 60000 training samples"),
    ("method=dfedavg local_steps=3", "set exactly one of engine.local_steps"),
    ("faults.drop=1.5", "faults.drop"),
    ("faults.crash_at=5", "faults.crash_nodes is empty"),
    ("faults.crash_at=5 faults.crash_nodes=[99]", "faults.crash_nodes must be node indices"),
    ("on_divergence=ignore", "engine.on_divergence"),
    ("resume=true", "no checkpoint.pt in"),
    ("checkpoint_seconds=-5", "checkpoint_seconds"),
    ("logger=wandb", "logger='wandb' is unknown; allowed: null, tensorboard"),
    ("data.sampler=dirichlet", "data.sampler='dirichlet' is unknown; allowed: label_mix, prior_mix, shards"),
    ("data.local_eval_size=0", "data.local_eval_size must be an integer >= 1"),
    ("method=dfedsam data.sampler=shards", "data.sampler has no effect on the round engine"),
    ("method=dpsgd local_steps=5", "local_steps has no effect with method=dpsgd: its preset sets engine.local_steps=1"),
    ("rounds=5", "rounds has no effect on the tick engine (method=gossip)"),
    ("optim.lrr=0.1", "unknown option optim.lrr; optim takes: lr, momentum"),
    ("method=dpsgd privacy.noise_multiplier=-1", "privacy.noise_multiplier must be null or auto or a finite number >= 0, got -1"),
    ("method=dpsgd privacy.noise_multiplier=abc", "privacy.noise_multiplier must be null or auto or a finite number >= 0, got 'abc'"),
    ("method=dpsgd privacy.noise_multiplier=1 privacy.clip=0", "privacy.clip must be a finite number > 0, got 0"),
    ("method=dpsgd privacy.clip=2", "privacy.clip is read only with privacy.noise_multiplier set (DP-SGD is off)"),
    ("method=dpsgd privacy.noise_multiplier=1 privacy.delta=1.5", "privacy.delta must be a number in (0, 1), got 1.5"),
    ("method=dpsgd privacy.noise_multiplier=1 privacy.accountant=gdp", "privacy.accountant='gdp' is unknown; allowed: rdp, prv"),
    ("method=dpsgd privacy.noise_multiplier=1 privacy.target_epsilon=0", "privacy.target_epsilon must be null or a finite number > 0"),
    ("method=adpsgd privacy.noise_multiplier=1", "method=adpsgd trains with its own step (train)"),
    ("method=dfedsam privacy.noise_multiplier=1", "method=dfedsam does its own local work (SAM steps)"),
    ("method=dfedavg model=resnet18 privacy.noise_multiplier=1", "model=resnet18 has BatchNorm"),
    ("method=muffliato algorithm.lambda2=1.2", "algorithm.lambda2 must be in [0, 1), got 1.2"),
    ("method=muffliato local_steps=3", "local_steps has no effect with method=muffliato"),
    # issue 49's messages: each names the option as typed and what to do
    ("method=clipped_gossip algorithm.tau=abc", "algorithm.tau must be a number or null, got 'abc'"),
    ("method=clipped_gossip algorithm.tauu=1", "unknown option algorithm.tauu; vecgossip.algorithms.clipped_gossip.ClippedGossip takes: tau (did you mean tau?)"),
    ("method=dpsgd adversary.nodes=1 adversary.attack=sign_flip adversary.epsilon=0.5",
     "adversary.epsilon=0.5 has no effect with adversary.attack=sign_flip"),
    ("method=dpsgd adversary.attack=nonsense", "adversary.attack has no effect without adversary.nodes"),
    ("method=dpsgd adversary.nodes=0 adversary.attack=nonsense", "adversary.attack=nonsense"),
    ("method=dpsgd clients=8 degree=10", "topology.k (degree) must be < topology.n (clients): k=10, n=8"),
    # issue 57: text data and the models that read it
    ("method=dpsgd data=shakespeare model=char_lstm clients=8 data.min_lines=100000",
     "data.min_lines=100000 leaves no role of data=shakespeare"),
    ("method=dpsgd data=shakespeare clients=8",
     "model=lenet reads image inputs, data=shakespeare gives character windows: use model=char_lstm, char_transformer"),
    ("method=dpsgd model=char_lstm clients=8", "model=char_lstm reads text inputs, data=mnist gives images: use model="),
    ("method=dpsgd data=shakespeare model=char_lstm clients=5000", "5000 is more than the 780 roles of data=shakespeare"),
    ("data.split=iid", "data.split applies to text data only (data=shakespeare), not the data set chosen here"),
    ("method=dpsgd data=shakespeare model=char_lstm clients=8 partition=dirichlet",
     "partition does not apply to data=shakespeare"),
    ("method=gossip data=shakespeare model=char_lstm nodes=8 data.eval_set=fixed100",
     "data.eval_set=fixed100 takes 10 test images per label"),
    ("model.width=32", "model.width applies to the models that take a width only: char_lstm, char_transformer"),
]


FORKS = REPO / "tests" / "cli_forks.py"


def test_bad_configs_fail_in_one_line(tmp_path):
    """Each config runs as `python -m vecgossip ...` in its own process: forked from one interpreter
    that imported the CLI once (tests/cli_forks.py), so the configs cost one torch import, not one
    each. Two of them also run from a fresh interpreter (below), as a user types them."""
    assert len(BAD) >= 30
    jobs = [[*args.split(), f"hydra.run.dir={tmp_path / f'run{i}'}"] for i, (args, _) in enumerate(BAD)]
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    proc = subprocess.run([sys.executable, str(FORKS), str(tmp_path / "jobs.json"), str(tmp_path / "results.json")],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert len(results) == len(BAD)
    for i, (r, (args, needle)) in enumerate(zip(results, BAD)):
        lines = r["stderr"].strip().splitlines()
        assert r["returncode"] == 2, (args, r["returncode"], r["stderr"][-500:])
        assert len(lines) == 1 and lines[0].startswith("vecgossip: error: "), (args, r["stderr"])
        assert needle in lines[0], (args, lines[0])
        assert "Traceback" not in r["stdout"] + r["stderr"]
        assert not (tmp_path / f"run{i}").exists(), (args, "a run directory was written")
        assert r["seconds"] < 60, (args, r["seconds"])
        assert r["peak_bytes"] < 1.5 * 2**30, \
            f"{args}: the child peaked at {r['peak_bytes'] / 2**30:.2f} GiB: something was allocated"


# Runs the command it is given and writes that child's peak RSS (kB) to the file named first. A
# process's ru_maxrss includes the memory of the process it was forked from (Linux keeps the old
# hiwater mark across exec), so a child forked straight from a big pytest process would report
# pytest's size; forked from this small interpreter, it reports its own.
PEAK = ("import resource, subprocess, sys; rc = subprocess.call(sys.argv[2:]); "
        "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); sys.exit(rc)")


@pytest.mark.parametrize("args, needle", [BAD[0], ("nodes=100000", "the run needs about")])
def test_bad_config_from_a_fresh_interpreter(tmp_path, args, needle):
    """The same contract with nothing pre-imported: a new interpreter, exactly as typed."""
    out, peak = tmp_path / "run", tmp_path / "peak"
    proc = subprocess.run([sys.executable, "-c", PEAK, str(peak), sys.executable, "-m", "vecgossip", *args.split(),
                           f"hydra.run.dir={out}"], cwd=REPO, capture_output=True, text=True, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("vecgossip: error: "), proc.stderr
    assert needle in lines[0] and "Traceback" not in proc.stdout + proc.stderr
    assert not out.exists()
    assert int(peak.read_text()) * 1024 < 1.5 * 2**30


@pytest.mark.parametrize("args,needle", [
    ("nodes=9 degree=3 seed=0,1", "job 0 of 2 of the sweep (seed=0): topology.n (nodes) x topology.k (degree) must be even"),
    ("method=dpsgd,dfedsam nodez=3", "unknown option nodez; the top level takes: "),
    ("method=dpsgdd,dpsgd", "job 0 of 2 of the sweep (method=dpsgdd): method=dpsgdd is unknown (did you mean dpsgd?); allowed: "),
    ("method=vc,gossip R=1,0", "job 1 of 4 of the sweep (method=vc R=0): algorithm.R (R) must be an integer >= 1, got 0"),
])
def test_every_job_of_a_sweep_is_checked_before_the_first_starts(tmp_path, args, needle):
    """-m: the jobs Hydra's basic sweeper will make, each composed and validated first; the first bad
    one's message, as a single run prints it, with which job; exit 2, no sweep directory."""
    proc = subprocess.run([sys.executable, "-m", "vecgossip", "-m", *args.split(),
                           f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=REPO, capture_output=True, text=True, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert lines[0].startswith("vecgossip: error: ") and needle in lines[0], lines[0]
    assert not (tmp_path / "sweep").exists()


# The FAQ's table of messages (docs/faq.md), each quote with the command that prints it. A quote's
# "..." stands for any text; every quote listed here must be what that command prints.
FAQ = {
    "unknown option model.widht; model takes: name, impl, exec, ...": "+model.widht=3",
    "unknown option nodez; the top level takes: name, plugins, ... (did you mean nodes?)": "nodez=3",
    "algorithm.correction (correction) must be true or false, got 1": "correction=1",
    "engine.early_stop (early_stop) must be true or false, got 'no'": "early_stop=no",
    "beta has no effect with algorithm vecgossip.algorithms.dfedavg.DFedAvg (method=dfedavg)": "method=dfedavg beta=0.3",
    "algorithm._target_=mypkg.Algo cannot be imported: no module named 'mypkg'": "algorithm._target_=mypkg.Algo",
    "experiment=mine is unknown; allowed: ...": "+experiment=mine",
    "topology=random_out is directed and unbalanced: no doubly stochastic W for ...":
        "method=dpsgd topology=random_out clients=16",
    "local_steps has no effect with method=dpsgd: its preset sets engine.local_steps=1": "method=dpsgd local_steps=5",
}


def test_the_faq_quotes_the_messages_printed(tmp_path):
    """Issue 39: every message the FAQ quotes for these inputs is the one the CLI prints (one line,
    exit 2); a FAQ row whose message changed fails here."""
    import re
    faq = (REPO / "docs" / "faq.md").read_text()
    quoted = [q for row in faq.splitlines() if row.startswith("| `") for q in re.findall(r"`([^`]+)`", row.split(" | ")[0])]
    for quote in FAQ:
        assert quote in quoted, f"the FAQ no longer quotes {quote!r}"
    jobs = [[*args.split(), f"hydra.run.dir={tmp_path / f'run{i}'}"] for i, args in enumerate(FAQ.values())]
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    proc = subprocess.run([sys.executable, str(FORKS), str(tmp_path / "jobs.json"), str(tmp_path / "results.json")],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for r, (quote, args) in zip(json.loads((tmp_path / "results.json").read_text()), FAQ.items()):
        line = r["stderr"].strip().splitlines()[-1]
        pattern = ".*".join(re.escape(part) for part in quote.split("..."))
        assert r["returncode"] == 2 and re.search(pattern, line), (args, quote, line)
