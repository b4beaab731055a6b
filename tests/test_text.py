"""data=shakespeare on both engines (issue 57): which roles a run keeps, the IID deal, every node
tested on all its own test windows (the ragged evaluation against a plain per-node loop), and
replicas and resume on the text task."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from conftest import StopAt, runs_of
from test_config import make
from test_replicas import replicas_equal_separate_runs
from vecgossip.composition import rounds as rounds_setup
from vecgossip.core.metrics import evaluate_ragged
from vecgossip.core.state import Layout, init_theta
from vecgossip.data import shakespeare
from vecgossip.data.partition import Partition
from vecgossip.data.text import chosen_roles, load_text, usable_roles
from vecgossip.models import build
from vecgossip.models.char_lstm import explicit_forward

TEXT = ["data=shakespeare", "model=char_lstm", "model.width=8", "model.exec=per_client", "data.batch_size=4",
        "progress=false"]
ROUNDS = ["method=dpsgd", "topology=ring", "clients=4", "rounds=3", "eval_every=1", "data.global_test_size=40", *TEXT]


def options(root, **kw):
    d = dict(name="shakespeare", root=str(root), text_file=None, min_lines=1, train_frac=0.8, sample_seed=0,
             split="roles")
    return SimpleNamespace(**{**d, **kw})


def test_a_run_keeps_roles_by_sample_seed_in_play_order(data_root):
    """n of the usable roles, drawn by data.sample_seed (not the run's seed), kept in play order;
    all of them when n is their number; more is refused in one line."""
    every = usable_roles(str(data_root), None, 1, 0.8)
    a, b = chosen_roles(options(data_root), 12), chosen_roles(options(data_root), 12)
    assert [r.name for r in a] == [r.name for r in b]
    assert [r.name for r in a] != [r.name for r in chosen_roles(options(data_root, sample_seed=1), 12)]
    order = {r.name: i for i, r in enumerate(every)}
    assert [order[r.name] for r in a] == sorted(order[r.name] for r in a)
    assert len(chosen_roles(options(data_root), len(every))) == len(every)
    with pytest.raises(ValueError, match=f"more than the {len(every)} roles"):
        chosen_roles(options(data_root), len(every) + 1)


def test_node_i_holds_role_i_and_iid_deals_the_same_windows(data_root):
    """split=roles: node i's rows are role i's windows, as shakespeare.build cuts them; split=iid:
    the same training and test windows, dealt in near-equal parts."""
    roles = chosen_roles(options(data_root), 5)
    train, test = load_text(options(data_root), 5)
    x, y = shakespeare.windows(roles[2].lines)
    tr, te = shakespeare.split(x.shape[0])
    g, h = train.groups, test.groups
    assert torch.equal(train.images[g[2]:g[3]], torch.from_numpy(x[tr])) and torch.equal(
        test.labels[h[2]:h[3]], torch.from_numpy(y[te].astype(np.int64)))
    assert train.tokens and train.batch(torch.tensor([0]))[0].dtype == torch.int64 and train.shape == (80,)
    itrain, itest = load_text(options(data_root, split="iid"), 5)
    assert np.diff(itrain.groups).max() - np.diff(itrain.groups).min() <= 1
    for a, b in ((train, itrain), (test, itest)):
        key = lambda d: sorted(map(bytes, torch.cat([d.images, d.labels[:, None].to(torch.uint8)], 1).numpy()))  # noqa: E731
        assert key(a) == key(b)


def test_ragged_evaluation_equals_a_per_node_loop():
    """Three nodes with 5, 1 and 7 test windows (padded to 7), in blocks of 2 nodes x 2 windows:
    each node's accuracy and mean loss over its own windows, as a plain loop of the plain module
    computes them (float64)."""
    torch.manual_seed(0)
    module = build("char_lstm", (12,), 80, width=8).double()
    layout = Layout.of(module)
    theta = init_theta(layout, 3, "torch", torch.Generator().manual_seed(1)).double() * 20   # confident, varied
    x = torch.randint(0, 80, (13, 12), dtype=torch.uint8)
    y = torch.randint(0, 80, (13,))
    data = SimpleNamespace(batch=lambda idx: (x[idx].long(), y[idx]))
    own = Partition(np.arange(13), np.array([0, 5, 6, 13]))           # rows padded past each node's size
    acc, loss = evaluate_ragged(explicit_forward, layout, theta, data, own.padded("cpu"), own.sizes, chunk=2, images=4)
    for i, (lo, hi) in enumerate([(0, 5), (5, 6), (6, 13)]):
        for spec in layout.specs:
            module.get_parameter(spec.name).data.copy_(theta[i, spec.start:spec.stop].view(spec.shape))
        with torch.no_grad():
            logits = module(x[lo:hi].long())
        assert acc[i].item() == pytest.approx((logits.argmax(1) == y[lo:hi]).double().mean().item(), abs=1e-12)
        assert loss[i].item() == pytest.approx(F.cross_entropy(logits, y[lo:hi]).item(), rel=1e-10)


def test_text_round_replicas_equal_separate_runs(data_root, tmp_path):
    """D-PSGD on four roles: replicas=2 give the separate runs of seeds 0 and 1 file for file; both
    keep the same roles (sample_seed), and the rows carry acc_chars."""
    top = replicas_equal_separate_runs(data_root, tmp_path, ROUNDS, lambda s: s["n_clients"] == 4)
    rows = pd.read_csv(top / "replica0" / "metrics.csv")
    assert "acc_chars" in rows and rows["acc_chars"].between(0, 1).all()


def test_text_tick_replicas_equal_separate_runs(data_root, tmp_path):
    """Gossip with variance correction on four roles, each node tested on all its own windows
    (data.eval_set=local): replicas=2 equal separate runs."""
    base = ["method=vc", "nodes=4", "degree=2", "max_ticks=30", "eval_every=10", *TEXT]
    replicas_equal_separate_runs(data_root, tmp_path, base, lambda s: s["n_nodes"] == 4)


def test_a_text_round_run_resumes_exactly(data_root):
    """The state taken after round 2 of D-PSGD on text, loaded into a fresh engine, continues to
    the uninterrupted run's rows."""
    runs = runs_of(make(ROUNDS + [f"data_root={data_root}"]))
    whole = rounds_setup.build_replicas(runs).run(progress=False)


    stop = StopAt(2)
    first = rounds_setup.build_replicas(runs).run(progress=False, checkpointer=stop)
    assert first.interrupted
    again = rounds_setup.build_replicas(runs).run(progress=False, resume=stop.blob)
    assert pd.DataFrame(again.rows).drop(columns=["wall_seconds"], errors="ignore").equals(
        pd.DataFrame(whole.rows).drop(columns=["wall_seconds"], errors="ignore"))


def test_the_acceptance_command_runs_from_the_command_line(data_root, tmp_path):
    """``method=dpsgd data=shakespeare model=char_lstm clients=8 rounds=1`` (narrowed for the test):
    exit 0; D-PSGD's default degree 10 on 8 clients becomes 7 with a line saying so."""
    import json
    import subprocess
    import sys
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "vecgossip", "method=dpsgd", "data=shakespeare", "model=char_lstm",
                        "clients=8", "rounds=1", "model.width=8", "model.exec=per_client", "progress=false",
                        f"data_root={data_root}", f"hydra.run.dir={out}"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "topology.k=10 is the default degree of method=dpsgd; with topology.n=8 it is 7" in r.stdout + r.stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["n_clients"] == 8 and s["partition"] == "roles" and s["config"]["topology"]["k"] == 7
    assert 0 <= s["final"]["acc_chars"] <= 1
