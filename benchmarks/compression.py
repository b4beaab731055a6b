"""What weight compression costs per tick: one synchronous training slot of the paper's tick model
(every node trains one step, sends to its k neighbours, averages; at T_acq = 10 this is every
10th tick's work) with uncompressed sends vs compressed sends (p = 0.2), and the send alone,
side by side, interleaved; "comp_var" also computes the arrived models' layer variances (what
variance correction needs; skipped without it). "comp" is the fused CPU kernel (sparse_send.deliver_cpu),
"dense" the first sampler (one uniform per element and link, torch.where of the two models), kept
for the before/after. (The sparse torch-ops path once timed here is gone: a GPU now runs every link
in one kernel, engines/tick/masked_send.py, whose CPU twin is a reference, not a CPU path.)

    python benchmarks/compression.py [--sizes 50x8 1000x8 1000x32] [--p 0.2] [--reps 3]

The last lines estimate the wall time of Table I's TL+compression row (10, 1, 1000, 8) IID from
the measured cost of a slot: reach tick (the paper's, 2810) / T_acq slots.
"""
from __future__ import annotations

import argparse

import numpy as np
import torch

from common import apply_malloc, emit, header, interleaved, make_engine, malloc_option, summary, sync_round
from vecgossip.engines.tick.buffer import Buffers
from vecgossip.core.correction import layer_variance
from vecgossip.report.paper import TABLE1


def dense_receive(buf: Buffers, recv, send, theta, p, layout, gen, max_elems: int = 1 << 26) -> None:
    """The sampler this replaced: links x P uniforms, a where of the two gathered models."""
    n_p = theta.shape[1]
    chunk = max(1, max_elems // n_p)
    for lo in range(0, recv.numel(), chunk):
        r, s = recv[lo:lo + chunk], send[lo:lo + chunk]
        keep = torch.rand(r.numel(), n_p, generator=gen) < p
        got = torch.where(keep, theta[s], theta[r])
        buf.total.index_add_(0, r, got)
        buf.var_total.index_add_(0, r, layer_variance(got, layout))
    buf.count += torch.bincount(recv, minlength=buf.count.numel()).to(buf.count.dtype)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", nargs="+", default=["50x8", "1000x8", "1000x32"], help="NxK")
    ap.add_argument("--p", type=float, default=0.2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dense-max-links", type=int, default=8000,
                    help="measure the previous dense sampler only up to this many links (it is slow)")
    malloc_option(ap)
    a = ap.parse_args()
    malloc = apply_malloc(a.malloc)
    print(header(f"compressed vs uncompressed sends (p = {a.p}), LeNet, one training slot", "cpu", malloc))
    rows = []
    for size in a.sizes:
        n, k = map(int, size.split("x"))
        eng = make_engine(n, k, "lenet", "cpu")
        nodes = np.arange(n)
        plain_cfg, comp_cfg = (1.0, False), (a.p, False)           # (element send probability, variances kept)
        comp_var_cfg = (a.p, True)                                  # variances computed too

        def send(cfg):
            def fn():
                eng.transport.compression, eng.transport.variances = cfg
                eng.send_models(nodes, None, 0)
                eng.buffers.clear(nodes)
            return fn

        def dense():
            recv, snd = eng.wiring.send.edges(None)
            dense_receive(eng.buffers, recv, snd, eng.state.theta, a.p, eng.layout, eng.gen)
            eng.buffers.clear(nodes)

        def slot(cfg):
            def fn():
                eng.transport.compression, eng.transport.variances = cfg
                sync_round(eng)
            return fn
        fns = {"send": send(plain_cfg), "send_comp": send(comp_cfg), "send_comp_var": send(comp_var_cfg),
               "send_dense": dense, "slot": slot(plain_cfg), "slot_comp": slot(comp_cfg)}
        if n * k > a.dense_max_links:
            del fns["send_dense"]
        t = interleaved(fns, reps=a.reps)
        ms = {key: 1e3 * v["median"] for key, v in t.items()}
        ms.setdefault("send_dense", float("nan"))
        emit(rows, {"N": n, "k": k, "send_ms": ms["send"], "comp_send_ms": ms["send_comp"],
                    "comp_var_send_ms": ms["send_comp_var"],
                    "dense_send_ms": ms["send_dense"], "slot_ms": ms["slot"], "comp_slot_ms": ms["slot_comp"],
                    "slot_ratio": ms["slot_comp"] / ms["slot"],
                    "dense_slot_ratio": (ms["slot"] - ms["send"] + ms["send_dense"]) / ms["slot"]})
    summary(rows, "slot = train + send + average of every node (one T_acq slot); slot_ratio = compressed / "
                  "uncompressed slot (the fused CPU kernel); dense_slot_ratio = the first sampler's (one uniform "
                  "per element)")
    for r in rows:
        if (r["N"], r["k"]) == (1000, 8):
            reach = TABLE1[("10", 1, 1000, 8)][0]
            est = reach / 10 * r["comp_slot_ms"] / 1e3
            print(f"\nTL+compression (10, 1, 1000, 8) IID: paper reach tick {reach} -> {reach // 10} slots x "
                  f"{r['comp_slot_ms']:.0f} ms = {est / 60:.1f} min of engine time on this CPU (evaluation "
                  f"every 10 ticks and the TL tests on top; TL sends on fewer links early on)")


if __name__ == "__main__":
    main()
