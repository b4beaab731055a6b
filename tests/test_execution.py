"""Issue 27: ``model.exec`` (vecgossip/models/execution.py). Per-client execution against a plain
nn.Module per client (loss, every gradient, BatchNorm running statistics, evaluation logits) for
every built-in model in float64; both paths agree; the same choice gives byte-identical outputs run
to run; ``auto`` measures once, records the choice and both timings, reuses the cached answer, and
a resumed run keeps the path its checkpoint recorded."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import StopAt, run_of
import torch
import torch.nn.functional as F

import vecgossip
from vecgossip.models.execution import ExecForward, per_client_forward
from vecgossip.models import build as build_model, make_forward
from vecgossip.core.optim import loss_and_grad
from vecgossip.core.state import Layout, init_theta, load_flat

sys.path.insert(0, str(Path(__file__).resolve().parent / "golden"))
import cases  # noqa: E402


def reference(name, norm, theta, x, y, layout):
    """Each client's plain module in training mode: loss, flat gradient, running statistics after."""
    losses, grads, stats = [], [], []
    for i in range(theta.shape[0]):
        net = build_model(name, tuple(x.shape[2:]), 10, norm).double()
        load_flat(net, layout, theta[i])
        net.train()
        loss = F.cross_entropy(net(x[i]), y[i])
        loss.backward()
        losses.append(loss.detach())
        grads.append(torch.cat([p.grad.flatten() for p in net.parameters()]))
        stats.append(torch.cat([b.flatten() for n, b in net.named_buffers() if n.endswith(("running_mean", "running_var"))]
                               or [torch.zeros(0, dtype=torch.float64)]))
    return torch.stack(losses), torch.stack(grads), torch.stack(stats)


@pytest.mark.parametrize("name, norm, shape", [("lenet", None, (1, 28, 28)), ("mlp", None, (1, 28, 28)),
                                               ("cnn", None, (3, 32, 32)), ("resnet18", "batch", (3, 16, 16)),
                                               ("vgg11", "batch", (3, 32, 32)), ("resnet18", "group", (3, 16, 16))])
def test_per_client_equals_plain_modules_and_the_batched_path(name, norm, shape):
    torch.manual_seed(0)
    module = build_model(name, shape, 10, norm)
    layout = Layout.of(module)
    theta = init_theta(layout, 3, "torch", torch.Generator().manual_seed(1)).double()
    x = torch.rand(3, 4, *shape, dtype=torch.float64)
    y = torch.randint(0, 10, (3, 4))
    fwd = ExecForward(make_forward(name, "explicit", shape, 10, norm),
                      per_client_forward(build_model(name, shape, 10, norm).to("meta")))
    want_loss, want_grad, want_stats = reference(name, norm, theta, x, y, layout)
    p = layout.params_size
    results = {}
    for mode in ("batched", "per_client"):
        fwd.train_mode = fwd.eval_mode = mode
        th = theta.clone()
        loss, grads = loss_and_grad(fwd, layout, th, x, y, factored=False)
        flat = torch.cat([g.reshape(3, -1) for g in grads], 1)
        assert torch.allclose(loss, want_loss, rtol=1e-10, atol=0), mode
        assert ((flat - want_grad).norm(dim=1) / want_grad.norm(dim=1)).max() < 1e-9, mode
        if layout.buffers:                                     # the running statistics each client's forward moved
            assert ((th[:, p:] - want_stats).norm(dim=1) / want_stats.norm(dim=1)).max() < 1e-9, mode
        with torch.no_grad():
            results[mode] = fwd(layout.views(th, buffers=True), x, train=False)
    for i in range(3):                                         # evaluation mode: the running statistics normalise
        net = build_model(name, shape, 10, norm).double()
        load_flat(net, layout, th[i])
        net.eval()
        with torch.no_grad():
            want = net(x[i])
        for mode in results:
            assert torch.allclose(results[mode][i], want, rtol=1e-9, atol=1e-12), (mode, i)


def run(tmp, name, extra):
    cases.register()
    return vecgossip.run(vecgossip.compose(overrides=[*cases.CASES[name], *[c for c in cases.COMMON
                                                                           if not c.startswith("model.exec")], *extra]),
                         run_dir=tmp)


@pytest.mark.parametrize("name", ["dfedsam", "vc"])
def test_the_same_choice_is_byte_identical_and_the_two_agree(tmp_path, name):
    a = run(tmp_path / "a", name, ["model.exec=per_client"])
    b = run(tmp_path / "b", name, ["model.exec=per_client"])
    assert (tmp_path / "a" / "metrics.csv").read_bytes() == (tmp_path / "b" / "metrics.csv").read_bytes()
    assert a.summary["execution"]["train"] == "per_client" and a.summary["execution"]["how"] == "configured"
    c = run(tmp_path / "c", name, ["model.exec=batched"])
    num = [k for k in a.metrics.columns if k not in ("tick", "round")]
    assert (a.metrics[num] - c.metrics[num]).abs().max().max() < 1e-8
    assert c.summary["execution"]["train"] == "batched"


def test_auto_measures_once_records_both_timings_and_reuses_the_answer(tmp_path, monkeypatch):
    monkeypatch.setenv("VECGOSSIP_EXEC_CACHE", str(tmp_path / "exec.json"))
    first = run(tmp_path / "one", "dfedavg", ["model.exec=auto"])
    ex = first.summary["execution"]
    assert ex["how"] == "measured" and ex["seconds"] > 0
    assert set(ex["train_ms"]) == {"batched", "per_client_nchw", "per_client_channels_last"}
    assert ex["train"] in ("batched", "per_client")
    cached = json.loads((tmp_path / "exec.json").read_text())
    assert len(cached) == 1 and next(iter(cached.values()))["train"] == ex["train"]
    again = run(tmp_path / "two", "dfedavg", ["model.exec=auto"])
    assert again.summary["execution"]["how"] == "cached" and again.summary["execution"]["train"] == ex["train"]


def test_a_resumed_run_keeps_the_path_its_checkpoint_recorded(tmp_path, monkeypatch):
    """The cache says per_client after the checkpoint was written on the batched path: the resume
    computes on the batched path and ends where the uninterrupted run does."""
    from vecgossip.composition import rounds
    monkeypatch.setenv("VECGOSSIP_EXEC_CACHE", str(tmp_path / "exec.json"))
    cases.register()
    cfg = vecgossip.compose(overrides=[*cases.CASES["dfedavg"], *[c for c in cases.COMMON if not c.startswith("model.exec")],
                                       "model.exec=auto"])
    (tmp_path / "exec.json").write_text("{}")
    whole = rounds.build_engine(run_of(cfg))
    key = next(iter(json.loads((tmp_path / "exec.json").read_text())))
    force = lambda mode: (tmp_path / "exec.json").write_text(json.dumps(  # noqa: E731
        {key: {"train": mode, "eval": mode, "train_ms": {}, "eval_ms": {}}}))
    force("batched")
    whole, first = rounds.build_engine(run_of(cfg)), rounds.build_engine(run_of(cfg))
    ref = whole.run(progress=False)

    stop = StopAt(1)   # keeps the state at position >= 1 and stops there
    first.run(progress=False, checkpointer=stop)
    force("per_client")
    again = rounds.build_engine(run_of(cfg))
    assert again.execution.train == "per_client"
    hist = again.run(progress=False, resume=stop.blob)
    assert again.execution.train == "batched" and again.forward.train_mode == "batched"
    assert torch.equal(again.state.theta, whole.state.theta) and len(hist.rows) == len(ref.rows)


def test_per_client_needs_the_margin_and_every_call_is_recorded(monkeypatch):
    """The probe (issue 46): per_client is picked only when its median beats the batched one's by
    more than MARGIN; each path is warmed up, then timed REPS times in turn (every call recorded),
    on the rows it is given (the batched path's chunk); the cache key names what timings depend on."""
    from vecgossip.core.state import Layout, init_theta
    from vecgossip.models import execution as ex, get_model, make_forward
    assert ex.pick({"batched": 10.0, "per_client_nchw": 9.5, "per_client_channels_last": 9.2}) == "batched"
    assert ex.pick({"batched": 10.0, "per_client_nchw": 8.8, "per_client_channels_last": 9.5}) == "per_client"
    assert ex.pick({}) == "batched" and ex.MARGIN == 0.10
    layout = Layout.of(get_model("mlp").factory())
    fwd = ex.ExecForward(make_forward("mlp"), ex.per_client_forward(get_model("mlp").factory()))
    theta = init_theta(layout, 6, "caffe_xavier", torch.Generator().manual_seed(0))
    x, y = torch.rand(6, 8, 1, 28, 28), torch.randint(0, 10, (6, 8))
    for per_client_ms, want in ((9.5, "batched"), (8.0, "per_client")):     # 5% faster, 20% faster
        seen = []

        def timed(fn, device):          # the work runs; the clock is scripted per path
            fn()
            mode = fwd.train_mode
            cl = fwd.paths["per_client"].channels_last if mode == "per_client" else None
            seen.append((mode, cl))
            return 6 * (10.0 if mode == "batched" else per_client_ms + (0.5 if cl else 0.0))
        monkeypatch.setattr(ex, "_timed", timed)
        d = ex.measure(fwd, layout, theta, x, y, evaluate=False)
        assert d.train == want and d.probe_nodes == 6 and d.how == "measured"
        assert {k: len(v) for k, v in d.calls_ms["train"].items()} == {
            "batched": ex.REPS, "per_client_nchw": ex.REPS, "per_client_channels_last": ex.REPS}
        assert d.train_ms == {"batched": 10.0, "per_client_nchw": per_client_ms, "per_client_channels_last": per_client_ms + 0.5}
        assert len(seen) == 3 * (1 + ex.REPS) and seen[:3] == [("batched", None), ("per_client", False), ("per_client", True)]
        assert seen[3:6] == seen[:3]                                 # alternated, round after round
    key = ex.cache_key("mlp", torch.device("cpu"), 64, "fp32", None, layout.size, (1, 28, 28))
    assert f"vecgossip {vecgossip.__version__}" in key and f"{layout.size} params" in key and "input 1x28x28" in key
    assert f"torch {torch.__version__}" in key
