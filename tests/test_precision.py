"""``precision=bf16`` (issue 12): forward and backward under torch.autocast(bfloat16) with fp32
master weights, checked against fp32 on the same inputs (gradients) and on a short run (the same
rounds, the same minibatches)."""
from __future__ import annotations

import pytest
import torch

from test_rounds import CLASSES, SHAPE, engine_for, fake_data  # noqa: F401 - the fixture
from vecgossip.models import build, make_forward
from vecgossip.core.optim import loss_and_grad
from vecgossip.core.state import Layout, init_theta


@pytest.mark.parametrize("model,norm", [("cnn", None), ("resnet18", "batch")])
def test_bf16_gradients_are_fp32_and_close_to_fp32(model, norm):
    """bf16 has an 8-bit mantissa (relative rounding 2^-9 = 2e-3): the gradients of 2 clients on
    batch 8 land within a few percent of fp32's, are fp32 tensors, and the master weights and
    running statistics stay fp32."""
    layout = Layout.of(build(model, SHAPE, CLASSES, norm))
    theta = init_theta(layout, 2, "torch", torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(2, 8, *SHAPE, generator=g), torch.randint(0, CLASSES, (2, 8), generator=g)
    grads = {}
    for precision in ("fp32", "bf16"):
        fwd = make_forward(model, "vmap", SHAPE, CLASSES, norm, precision)
        th = theta.clone()
        loss, grads[precision] = loss_and_grad(fwd, layout, th, x, y, factored=False)
        assert th.dtype == torch.float32 and loss.dtype == torch.float32
        assert all(gr.dtype == torch.float32 for gr in grads[precision])
    num = sum(float((a - b).square().sum()) for a, b in zip(grads["bf16"], grads["fp32"]))
    den = sum(float(b.square().sum()) for b in grads["fp32"])
    rel = (num / den) ** 0.5
    assert 1e-5 < rel < 5e-2, rel            # really bf16 (not fp32 again), and close


def test_bf16_round_run_tracks_fp32(fake_data):  # noqa: F811 - pytest fixture
    """Three rounds of DFedAvgM (4 local steps, momentum) on the CIFAR CNN's vmap path, fp32 vs bf16,
    the same minibatches: the training loss of every round within 1% of fp32's (measured 0.4%), the
    models within 20% of the distance they moved (measured 10%: on random-pixel images the
    max-pool decisions amplify bf16's rounding, as they amplify float32's, test_rounds.py)."""
    out = {}
    for precision in ("fp32", "bf16"):
        cfg, engine = engine_for("dfedavgm", ["topology=ring", "local_steps=4", "local_epochs=null", "rounds=3",
                                              "model.impl=vmap", f"precision={precision}"])
        init = engine.state.theta.clone()
        hist = engine.run(progress=False)
        out[precision] = (init, engine.state.theta.clone(), [r["train_loss_mean"] for r in hist.rows[1:]])
    (i32, t32, l32), (i16, t16, l16) = out["fp32"], out["bf16"]
    assert torch.equal(i32, i16) and t16.dtype == torch.float32
    moved = (t32 - i32).norm()
    assert moved > 1e-2 * i32.norm()
    assert 0 < (t16 - t32).norm() < 0.2 * moved
    assert all(abs(a - b) < 0.01 * b for a, b in zip(l16, l32)), (l16, l32)


def test_tf32_and_fp32_set_a_gpus_float32_math_and_leave_a_cpu_alone(monkeypatch):
    """precision=tf32 turns on TF32 for cuBLAS matmuls and cuDNN convolutions inside a run, fp32
    turns both off (PyTorch's own default leaves convolutions on TF32); the settings come back after
    the run; a CPU device is untouched (no TF32 there). The flags are set and read, not computed
    with: no GPU is needed."""
    from vecgossip.runtime.precision import float32_math
    matmul, conv = torch.backends.cuda.matmul, torch.backends.cudnn.conv
    before = matmul.fp32_precision, conv.fp32_precision
    with float32_math("tf32", torch.device("cuda")):
        assert (matmul.fp32_precision, conv.fp32_precision) == ("tf32", "tf32")
    assert (matmul.fp32_precision, conv.fp32_precision) == before
    with float32_math("fp32", torch.device("cuda")):
        assert (matmul.fp32_precision, conv.fp32_precision) == ("ieee", "ieee")
    with float32_math("tf32", torch.device("cpu")):
        assert (matmul.fp32_precision, conv.fp32_precision) == before
    from vecgossip.config.schema import RunBase
    assert RunBase.model_fields["precision"].default == "tf32"
