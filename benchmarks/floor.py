"""How fast could the batched side be on this machine? Upper bounds on issue 13's (and issue 8's)
speedup lines, measured in one run beside the ratio the shipped code reaches.

    python benchmarks/floor.py [--lines lenet8 lenet64 cnn128 eval] [--n 50] [--m 100] [--reps 5]

Every convolution phase (forward, input gradient, weight gradient) of every conv layer is timed
under each candidate batched implementation, and the fastest is kept per phase, independently:

- oneDNN convolution in channels_last over c nodes per call (groups = c; c = 1 is the per-node
  call of the loop), for every c in the line's chunk list; the input and weight gradients timed
  apart and together (oneDNN shares work when it computes both);
- im2col + batched GEMM across nodes (issue 13 item 2): forward cols @ W, weight gradient
  g^T @ cols, input gradient g @ W^T, each timed WITHOUT the im2col copy and the col2im (fold)
  that a real path must add, so the time is a lower bound for that path;
- NNPACK's forward (FFT / Winograd algorithms: fewer FLOPs) per node, where it runs and agrees
  with F.conv2d to 1e-4 (the output says when it does not; on the 2-core AMD EPYC it failed in a
  fresh process for every shape tried, yet ran inside one full run);
- for evaluation only, conv1 over the shared images (issue 13 item 3): one ungrouped convolution
  of the 100 images against the filters of c nodes, no per-node copies of the images.

Before it is timed, every candidate is checked against per-node ``F.conv2d`` and autograd in
float64 (a twin: forward, both gradients, and the fold of the GEMM input gradient).

Bounds (a bound is a speedup no batched implementation of these layers can beat here):
- ``bound_conv``  = loop time / conv floor: everything but the convolutions costs nothing;
- ``bound_gemm``  = loop time / (conv floor + the linear layers' FLOPs at this run's sgemm rate).
- ``bound_state`` = loop time / (conv floor + linear at sgemm + the state's DRAM passes): the
  (nodes, P) float32 state is far larger than the last-level cache (CNN, 100 clients: 351 MB), and
  every step must read and write the weights and the momentum once (SGD with momentum: two
  passes), a DFL round's gossip x <- W x the weights once more (one pass); a pass is timed as one
  ``copy_`` of the state (one read and one write of every byte);
- ``bound_act``  = the same, also charging each node's conv outputs once (the max-pool forward
  must read what the convolution wrote, and its backward write the gradient the convolution's
  backward reads; timed as one ``copy_`` of that many bytes per node): it holds for paths built
  from the convolutions measured here, which write whole outputs, not for a fused conv + pool kernel.
For evaluation the bound is a lower bound on its share of a training round: (conv forward floor
over the 100 images + the linear layers' forward FLOPs at the sgemm rate) / (the training round as
measured: train + send + Eq. 1 average + correction of ``benchmarks/common.round_parts``).
With lenet64 and eval both measured, ``joint`` checks the two lines together: a round whose step
meets lenet64 (loop / 2) plus the measured send, average and correction allows evaluation 25% of
that; if evaluation's floor is above it, no implementation meets both lines on this machine.
"""
from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F

from common import apply_malloc, header, input_shape, interleaved, malloc_option, matmul_gflops, table

Tensor = torch.Tensor
K = 5                                                                        # kernel side of every conv here
LAYERS = {   # model -> (name, in channels, out channels, input side, input gradient needed)
    "lenet": (("conv1", 1, 20, 28, False), ("conv2", 20, 50, 12, True)),
    "cnn": (("conv1", 3, 32, 32, False), ("conv2", 32, 64, 14, True)),
}
LINEAR_MACS = {"lenet": 800 * 500 + 500 * 10, "cnn": 1600 * 512 + 512 * 10}   # per image
TARGETS = {"lenet8": 2.5, "lenet64": 2.0, "cnn128": 1.5, "eval": 0.25}


def _oneDNN(x: Tensor, w: Tensor, g: Tensor, c: int, mask: list[bool]):
    return torch.ops.aten.convolution_backward(g, x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], c,
                                               mask)


def im2col(x: Tensor) -> Tensor:
    """x (c, B, s, s, cin) channels-last per node -> cols (c, B*o*o, K*K*cin), columns (ky, kx, ci)."""
    c, b, s, _, cin = x.shape
    o = s - K + 1
    return x.unfold(2, K, 1).unfold(3, K, 1).permute(0, 1, 2, 3, 5, 6, 4).reshape(c, b * o * o, K * K * cin)


def gemm_weights(w: Tensor, c: int) -> Tensor:
    """Grouped weights (c*cout, cin, K, K) -> (c, K*K*cin, cout), rows in im2col's column order."""
    cout, cin = w.shape[0] // c, w.shape[1]
    return w.reshape(c, cout, cin, K, K).permute(0, 3, 4, 2, 1).reshape(c, K * K * cin, cout)


def fold(dcols: Tensor, b: int, s: int, cin: int) -> Tensor:
    """The GEMM input gradient dcols (c, B*o*o, K*K*cin) summed back onto the input: (c, B, cin, s, s)."""
    c, o = dcols.shape[0], s - K + 1
    d = dcols.reshape(c * b, o * o, K, K, cin).permute(0, 4, 2, 3, 1).reshape(c * b, cin * K * K, o * o)
    return F.fold(d, (s, s), K).reshape(c, b, cin, s, s)


NNPACK_SAID: list[bool] = []      # the "not used" line is printed once per process


def nnpack_forward(x: Tensor, w: Tensor):
    """NNPACK's forward convolution (its algorithms include FFT and Winograd, fewer FLOPs than a
    direct convolution) as a candidate, or None where it does not run here (printed once)."""
    xc, wc = x.contiguous(), w.contiguous()
    try:
        y = torch._nnpack_spatial_convolution(xc[:2], wc, None, [0, 0], [1, 1])
        ref = F.conv2d(xc[:2].double(), wc.double())
        err = ((y.double() - ref).abs().max() / ref.abs().max()).item()
        if err > 1e-4:
            raise RuntimeError(f"differs from F.conv2d in float64 by {err:.1e}")
    except RuntimeError as e:
        if not NNPACK_SAID:
            print(f"NNPACK candidate: not used in this process ({str(e).splitlines()[0]})", flush=True)
            NNPACK_SAID.append(True)
        return None
    return lambda: torch._nnpack_spatial_convolution(xc, wc, None, [0, 0], [1, 1])


def twin_error(cin: int, cout: int, s: int, c: int = 2, b: int = 3) -> float:
    """Largest relative difference between every candidate and per-node F.conv2d + autograd (float64)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(c, b, cin, s, s, generator=g, dtype=torch.float64)
    w = torch.randn(c * cout, cin, K, K, generator=g, dtype=torch.float64)
    o = s - K + 1
    gy = torch.randn(c, b, cout, o, o, generator=g, dtype=torch.float64)
    ref_y, ref_dx, ref_dw = [], [], []
    for i in range(c):                                                    # the per-node loop
        xi = x[i].clone().requires_grad_()
        wi = w[i * cout:(i + 1) * cout].clone().requires_grad_()
        yi = F.conv2d(xi, wi)
        dx, dw = torch.autograd.grad(yi, (xi, wi), gy[i])
        ref_y.append(yi.detach()), ref_dx.append(dx), ref_dw.append(dw)
    ref_y, ref_dx, ref_dw = torch.stack(ref_y), torch.stack(ref_dx), torch.cat(ref_dw)
    rel = lambda a, r: ((a - r).abs().max() / r.abs().max()).item()     # noqa: E731
    errs = []
    # oneDNN grouped, channels_last, nodes folded into channels
    xg = x.transpose(0, 1).reshape(b, c * cin, s, s).contiguous(memory_format=torch.channels_last)
    gg = gy.transpose(0, 1).reshape(b, c * cout, o, o).contiguous(memory_format=torch.channels_last)
    y = F.conv2d(xg, w, groups=c).reshape(b, c, cout, o, o).transpose(0, 1)
    dx, dw, _ = _oneDNN(xg, w, gg, c, [True, True, False])
    errs += [rel(y, ref_y), rel(dx.reshape(b, c, cin, s, s).transpose(0, 1), ref_dx), rel(dw, ref_dw)]
    # im2col + batched GEMM
    cols = im2col(x.permute(0, 1, 3, 4, 2))
    wm = gemm_weights(w, c)
    gm = gy.permute(0, 1, 3, 4, 2).reshape(c, b * o * o, cout)
    y = torch.bmm(cols, wm).reshape(c, b, o, o, cout).permute(0, 1, 4, 2, 3)
    dwm = torch.bmm(gm.transpose(1, 2), cols)                              # (c, cout, K*K*cin)
    dw = dwm.reshape(c, cout, K, K, cin).permute(0, 1, 4, 2, 3).reshape(c * cout, cin, K, K)
    errs += [rel(y, ref_y), rel(dw, ref_dw), rel(fold(torch.bmm(gm, wm.transpose(1, 2)), b, s, cin), ref_dx)]
    # one image set shared by every node: ungrouped conv against all nodes' filters
    y = F.conv2d(x[0], w).reshape(b, c, cout, o, o).transpose(0, 1)
    ref0 = torch.stack([F.conv2d(x[0], w[i * cout:(i + 1) * cout]) for i in range(c)])
    errs.append(rel(y, ref0))
    return max(errs)


def _time(fn, reps: int) -> float:
    return interleaved({"f": fn}, reps=reps)["f"]["median"]


def conv_floor(model: str, batch: int, nodes: int, chunks: list[int], reps: int, train: bool,
               shared_input: bool = False, mem_cap: float = 1.5e9) -> tuple[float, list[dict]]:
    """Seconds for ``nodes`` nodes of the model's conv layers at the fastest candidate per phase
    (forward; with ``train``, the input and weight gradients), and one row per phase naming it."""
    total, rows = 0.0, []
    for name, cin, cout, s, needs_dx in LAYERS[model]:
        o = s - K + 1
        flop = 2 * batch * o * o * cout * cin * K * K                    # per node, per phase
        best: dict[str, tuple[float, str]] = {}

        def keep(phase, secs_per_node, how):
            if phase not in best or secs_per_node < best[phase][0]:
                best[phase] = (secs_per_node, how)
        for c in chunks:
            if 4 * c * batch * (s * s * cin + o * o * cout + o * o * K * K * cin) > mem_cap:
                continue
            x = torch.randn(batch, c * cin, s, s).contiguous(memory_format=torch.channels_last)
            w = torch.randn(c * cout, cin, K, K).contiguous(memory_format=torch.channels_last)
            gy = torch.randn(batch, c * cout, o, o).contiguous(memory_format=torch.channels_last)
            keep("forward", _time(lambda: F.conv2d(x, w, groups=c), reps) / c, f"oneDNN c={c}")
            if c == 1 and (nn := nnpack_forward(x, w)) is not None:
                keep("forward", _time(nn, reps), "NNPACK c=1")
            if shared_input and name == "conv1":
                xs = torch.randn(batch, cin, s, s).contiguous(memory_format=torch.channels_last)
                keep("forward", _time(lambda: F.conv2d(xs, w), reps) / c, f"shared images c={c}")
            cols = torch.randn(c, batch * o * o, K * K * cin)
            wm = torch.randn(c, K * K * cin, cout)
            keep("forward", _time(lambda: torch.bmm(cols, wm), reps) / c, f"GEMM c={c} (no im2col)")
            if train:
                gm = torch.randn(c, batch * o * o, cout)
                keep("weight grad", _time(lambda: _oneDNN(x, w, gy, c, [False, True, False]), reps) / c,
                     f"oneDNN c={c}")
                keep("weight grad", _time(lambda: torch.bmm(gm.transpose(1, 2), cols), reps) / c,
                     f"GEMM c={c} (no im2col)")
                if needs_dx:
                    keep("input grad", _time(lambda: _oneDNN(x, w, gy, c, [True, False, False]), reps) / c,
                         f"oneDNN c={c}")
                    keep("input grad", _time(lambda: torch.bmm(gm, wm.transpose(1, 2)), reps) / c,
                         f"GEMM c={c} (no col2im)")
                    keep("both grads", _time(lambda: _oneDNN(x, w, gy, c, [True, True, False]), reps) / c,
                         f"oneDNN c={c}")
            del x, w, gy, cols, wm
        phases = ["forward"]
        if train:
            phases += ["weight grad"]
            if needs_dx:
                apart = best["weight grad"][0] + best["input grad"][0]
                phases = ["forward", "both grads"] if best["both grads"][0] < apart else \
                    ["forward", "weight grad", "input grad"]
        for ph in phases:
            secs, how = best[ph]
            total += secs * nodes
            rows.append({"layer": name, "phase": ph, "fastest": how, "ms": 1e3 * secs * nodes,
                         "GFLOP/s": (2 if ph == "both grads" else 1) * flop / secs / 1e9})
    return total, rows


def state_bytes(model: str) -> int:
    """Bytes of one node's float32 parameters."""
    from vecgossip.models import get_model
    from vecgossip.core.state import Layout
    return 4 * Layout.of(get_model(model).factory(input_shape(model), 10)).size


def stream_floor(model: str, batch: int, nodes: int, passes: int, reps: int) -> tuple[float, float]:
    """Seconds of ``passes`` DRAM passes over the (nodes, P) state, and of one pass over every
    node's conv outputs (bound_state / bound_act in the module docstring), each timed as copy_."""
    src = torch.empty(nodes * state_bytes(model) // 4).fill_(1.0)
    dst = torch.empty_like(src)
    state_s = passes * _time(lambda: dst.copy_(src), reps)
    act = batch * sum((s - K + 1) ** 2 * cout for _, _, cout, s, _ in LAYERS[model])     # floats per node
    a_src = torch.empty(act).fill_(1.0)
    a_dst = torch.empty_like(a_src)
    act_s = nodes * _time(lambda: a_dst.copy_(a_src), reps)
    return state_s, act_s


def train_line(line: str, a, gflops: float) -> dict:
    """The shipped ratio and the bounds for one training line (lenet8, lenet64, cnn128)."""
    if line.startswith("lenet"):
        import train_step
        from vecgossip.models.chunks import resolve_chunk
        model, batch, nodes = "lenet", int(line[5:]), a.n
        chunk = resolve_chunk("auto", torch.device("cpu"), batch, model)
        batched, loop, _ = train_step.setup(model, nodes, batch, "cpu", "explicit", chunk)
        fns = {"batched": batched, "loop": loop}
        chunks = sorted({1, 2, 4, chunk, 10, 25, nodes} - {0})
        chunks = [c for c in chunks if c <= nodes]
    else:
        import rounds
        model, batch, nodes = "cnn", int(line[3:]), a.m
        batched, loops, _, eng = rounds.setup(nodes, model, batch, 1, "dfedavgm")
        fns = {"batched": batched, **loops}
        chunks = [c for c in sorted({1, 2, 4, 8, eng.train_chunk}) if c <= nodes]
    t = interleaved(fns, reps=a.reps)
    loop_s = min(v["median"] for k, v in t.items() if k.startswith("loop"))
    conv_s, rows = conv_floor(model, batch, nodes, chunks, a.conv_reps, train=True)
    linear_s = 3 * 2 * LINEAR_MACS[model] * batch * nodes / (gflops * 1e9)
    passes = 2 if model == "lenet" else 3           # SGD's w and v; the CNN line is a DFL round: + gossip
    state_s, act_s = stream_floor(model, batch, nodes, passes, a.conv_reps)
    for r in rows:
        print(f"  {line}: {r['layer']} {r['phase']:11s} fastest {r['fastest']:24s} {r['ms']:8.1f} ms "
              f"{r['GFLOP/s']:5.0f} GFLOP/s", flush=True)
    return {"line": line, "nodes": nodes, "batch": batch, "loop_ms": 1e3 * loop_s,
            "batched_ms": 1e3 * t["batched"]["median"], "speedup": loop_s / t["batched"]["median"],
            "conv_floor_ms": 1e3 * conv_s, "linear_at_sgemm_ms": 1e3 * linear_s,
            "state_ms": 1e3 * state_s, "act_ms": 1e3 * act_s,
            "bound_conv": loop_s / conv_s, "bound_gemm": loop_s / (conv_s + linear_s),
            "bound_state": loop_s / (conv_s + linear_s + state_s),
            "bound_act": loop_s / (conv_s + linear_s + state_s + act_s), "target": TARGETS[line]}


def eval_line(a, gflops: float) -> dict:
    """Evaluation of n nodes on 100 shared images against a training round: measured and its floor."""
    from common import make_engine, round_parts
    eng = make_engine(a.n, 8 if a.n > 8 else 2, "lenet", "cpu")             # the paper's k = 8
    med = round_parts(eng, a.reps, "cpu")
    round_ms = med["train"] + med["send"] + med["average"] + med["correction"]
    chunks = [c for c in (1, 2, 5, 10, 25, 50) if c <= a.n]
    conv_s, rows = conv_floor("lenet", 100, a.n, chunks, a.conv_reps, train=False, shared_input=True)
    for r in rows:
        print(f"  eval: {r['layer']} {r['phase']:11s} fastest {r['fastest']:24s} {r['ms']:8.1f} ms "
              f"{r['GFLOP/s']:5.0f} GFLOP/s", flush=True)
    floor_ms = 1e3 * (conv_s + 2 * LINEAR_MACS["lenet"] * 100 * a.n / (gflops * 1e9))
    return {"line": "eval", "nodes": a.n, "batch": 100, "round_ms": round_ms,
            "comm_ms": med["send"] + med["average"] + med["correction"], "eval_ms": med["eval"],
            "share": med["eval"] / round_ms, "eval_floor_ms": floor_ms, "share_floor": floor_ms / round_ms,
            "target": TARGETS["eval"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", nargs="+", default=list(TARGETS), choices=list(TARGETS))
    ap.add_argument("--n", type=int, default=50, help="LeNet nodes (lenet8, lenet64, eval)")
    ap.add_argument("--m", type=int, default=100, help="CNN clients (cnn128)")
    ap.add_argument("--reps", type=int, default=5, help="interleaved repetitions of the whole step / round")
    ap.add_argument("--conv-reps", type=int, default=5, help="repetitions of each conv candidate")
    malloc_option(ap)
    a = ap.parse_args()
    malloc = apply_malloc(a.malloc)
    print(header("floor: upper bounds on the batched/loop speedups (issue 13)", "cpu", malloc), flush=True)
    gflops = matmul_gflops()
    print(f"sgemm used below: {gflops:.0f} GFLOP/s", flush=True)
    for model, layers in LAYERS.items():
        for name, cin, cout, s, _ in layers:
            err = twin_error(cin, cout, s)
            print(f"twin {model}.{name}: every candidate vs per-node F.conv2d + autograd (float64): "
                  f"max rel err {err:.1e} ({'OK' if err < 1e-12 else 'FAIL'})", flush=True)
    rows = [eval_line(a, gflops) if line == "eval" else train_line(line, a, gflops) for line in a.lines]
    train_rows = [r for r in rows if r["line"] != "eval"]
    if train_rows:
        print("\nspeedup = loop / batched (median, interleaved); bound_conv = loop / conv floor; "
              "bound_gemm = loop / (conv floor + linear FLOPs at sgemm); bound_state: + the state's DRAM "
              "passes (state_ms); bound_act: + one pass over the conv outputs (act_ms); target: the issue's line")
        print(table(train_rows, ["line", "nodes", "batch", "loop_ms", "batched_ms", "speedup", "conv_floor_ms",
                                 "linear_at_sgemm_ms", "state_ms", "act_ms", "bound_conv", "bound_gemm",
                                 "bound_state", "bound_act", "target"]))
        for r in train_rows:
            if r["bound_gemm"] < r["target"]:
                verdict = "cannot be met by any batched conv path here"
            elif r["bound_state"] < r["target"]:
                verdict = "cannot be met here: with the state's DRAM passes no batched conv path fits"
            elif r["bound_act"] < r["target"]:
                verdict = "cannot be met with whole-output convolutions here (a fused conv + pool kernel is not excluded)"
            else:
                verdict = "not excluded by the bounds"
            print(f"{r['line']}: target {r['target']}x, measured {r['speedup']:.2f}x, bound {r['bound_gemm']:.2f}x "
                  f"/ {r['bound_state']:.2f}x with the state / {r['bound_act']:.2f}x with the conv outputs: {verdict}")
    for r in rows:
        if r["line"] == "eval":
            print("\nevaluation share of a training round (train + send + average + correction), measured and "
                  "at the floor (conv forward floor + linear FLOPs at sgemm)")
            print(table([r], ["line", "nodes", "batch", "round_ms", "eval_ms", "share", "eval_floor_ms",
                              "share_floor", "target"]))
            verdict = "cannot be met" if r["share_floor"] > r["target"] else "not excluded by the bound"
            print(f"eval: target <= {r['target']}, measured {r['share']:.2f}, floor {r['share_floor']:.2f}: {verdict}")
    by = {r["line"]: r for r in rows}
    if "lenet64" in by and "eval" in by:
        ev, l64 = by["eval"], by["lenet64"]
        cap = TARGETS["eval"] * (l64["loop_ms"] / TARGETS["lenet64"] + ev["comm_ms"])
        print(f"\njoint: a round whose step meets lenet64 ({TARGETS['lenet64']}x the loop: <= "
              f"{l64['loop_ms'] / TARGETS['lenet64']:.0f} ms) + send/average/correction ({ev['comm_ms']:.0f} ms) "
              f"leaves evaluation <= {cap:.0f} ms at {TARGETS['eval']}; its floor is {ev['eval_floor_ms']:.0f} ms: "
              + ("the two lines cannot both hold here" if ev["eval_floor_ms"] > cap else "not excluded"))
    assert all(math.isfinite(v) for r in rows for v in r.values() if isinstance(v, float))


if __name__ == "__main__":
    main()
