"""DP-SGD's local step (issue 38), side by side in one run, interleaved, on the same minibatches:

* ``plain``: the engine's non-private local step of M clients (vecgossip.core.optim.local_step);
* ``dp``: the engine's DP-SGD step of the same M clients (vecgossip.privacy: per-sample gradients
  of every client and sample from one batched forward, clipped, each client's own noise stream);
* ``opacus_loop``: what a competent user writes without vecgossip: one ``nn.Module`` per client
  wrapped in Opacus's ``GradSampleModule`` with a ``DPOptimizer`` (Opacus's own per-sample hooks,
  clipping and noise), stepped client after client.

    python benchmarks/privacy_speed.py [--model lenet] [--clients 16] [--batch 64] [--reps 7] [--device cuda]

Printed: ms per local step of all M clients (median of the interleaved repetitions, and min), and
the ratios dp / plain (what privacy costs in the engine) and opacus_loop / dp (the speed-up over
the loop)."""
from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.nn.functional as F

from common import emit, header, interleaved, summary
import vecgossip
from vecgossip.composition.parts import model_parts
from vecgossip.config.load import load
from vecgossip.core.optim import LocalSGDConfig, local_step
from vecgossip.core.state import flatten
from vecgossip.models import build as build_model
from vecgossip.privacy import PrivacyConfig
from vecgossip.privacy.private import PrivateTraining

SHAPES = {"lenet": (1, 28, 28), "cnn": (3, 32, 32), "mlp": (1, 28, 28)}


def opacus_loop(name: str, shape, theta: torch.Tensor, layout, sigma: float, clip: float, batch: int, lr: float,
                device="cpu"):
    """Per-client modules with Opacus's GradSampleModule and DPOptimizer (plain SGD inside)."""
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer
    from vecgossip.core.state import load_flat
    clients = []
    for i in range(theta.shape[0]):
        net = build_model(name, shape, 10)
        load_flat(net, layout, theta[i].cpu())
        net = net.to(device)
        gsm = GradSampleModule(net)
        opt = DPOptimizer(torch.optim.SGD(gsm.parameters(), lr=lr), noise_multiplier=sigma, max_grad_norm=clip,
                          expected_batch_size=batch)
        clients.append((gsm, opt))

    def step(x, y):
        for i, (gsm, opt) in enumerate(clients):
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(gsm(x[i]), y[i]).backward()
            opt.step()
    return step


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="lenet", choices=sorted(SHAPES))
    ap.add_argument("--clients", type=int, nargs="+", default=[4, 16])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    dev = torch.device(a.device)
    print(header(f"DP-SGD local step: engine (plain, dp) vs per-client Opacus ({a.model}, batch {a.batch})", dev))
    shape = SHAPES[a.model]
    cfg = load(vecgossip.compose("dfedavg", overrides=[f"model={a.model}", "model.exec=batched"]), []).first.cfg
    layout, forward = model_parts(cfg, shape, 10)
    rows = []
    sigma, clip, lr = 1.0, 1.0, 0.05
    opt = LocalSGDConfig(lr=lr, momentum=0.0, weight_decay=0.0)
    for m in a.clients:
        torch.manual_seed(0)
        theta = torch.stack([flatten(build_model(a.model, shape, 10)) for _ in range(m)]).to(dev)
        mom = torch.zeros_like(theta)
        x = torch.randn(m, a.batch, *shape, device=dev)
        y = torch.randint(0, 10, (m, a.batch), device=dev)
        priv = PrivateTraining(PrivacyConfig(noise_multiplier=sigma, clip=clip), 0, np.full(m, a.batch / 3750))
        clients = np.arange(m)
        iters = torch.zeros(m, dtype=torch.long, device=dev)
        th_plain, th_dp = theta.clone(), theta.clone()
        loop = opacus_loop(a.model, shape, theta, layout, sigma, clip, a.batch, lr, dev)
        fns = {"plain": lambda: local_step(forward, layout, th_plain, mom, x, y, None, lr, opt),
               "dp": lambda: priv.update(forward, layout, th_dp, mom, x, y, None, lr, opt, clients, iters),
               "opacus_loop": lambda: loop(x, y)}
        t = interleaved(fns, reps=a.reps, warmup=1, rotate=True, device=dev)
        emit(rows, {"model": a.model, "clients": m, "batch": a.batch,
                    **{f"{k}_ms": 1e3 * v["median"] for k, v in t.items()},
                    **{f"{k}_min_ms": 1e3 * v["min"] for k, v in t.items()},
                    "dp_over_plain": t["dp"]["median"] / t["plain"]["median"],
                    "opacus_over_dp": t["opacus_loop"]["median"] / t["dp"]["median"]})
    summary(rows, "ms per local step of all clients, median (and min) of interleaved repetitions; "
                  "dp_over_plain = privacy's cost, opacus_over_dp = speed-up over the per-client Opacus loop")


if __name__ == "__main__":
    main()
