"""The long GPU study (the sections a lent GPU ran before issue 46; benchmarks/gpu_check.py is the
first, short, safe call): correctness against the CPU, then round timings and a loop baseline.

    python benchmarks/gpu_extended.py                       # on a GPU machine (writes $OUT/gpu_extended.json)
    python benchmarks/gpu_extended.py --device cpu --n 8 16 --loop-n 8 --check-n 8   # smoke run on a CPU

1. Correctness: N = --check-n LeNet nodes, three synchronous rounds (train, send, Eq. 1 average,
   variance correction) from the same initial models and the same batches on the CPU and on the
   device (TF32 off for the check); the parameters must agree to 1e-3 relative.
2. Timing: one round (train + send + average + correction) and evaluation at N in --n; the
   per-node loop of nn.Modules + torch.optim at N in --loop-n; speedup = loop per node / vecgossip per node.
4. Compressed sends (p = 0.2, `vecgossip/engines/tick/sparse_send.py`): the device's sparse delivery against the
   CPU's on the same sent positions (totals and layer variances, 1e-4 relative), then compressed vs
   uncompressed send per slot at N in --comp-n (k = --k).
3. Achieved TFLOP/s of the training step (LeNet B=64: 0.881 GFLOP per node step) and GB/s of the
   state traffic, against DESIGN.md's floors (N=1000 step: ~13 ms fp32, ~7 ms memory-bound TF32).
6. Replicas in one batch (benchmarks/replicas.py): --replicas S replicas of N = --replica-n LeNet
   nodes (synthetic images, T_acq [1, 19], --replica-ticks ticks) as one replicas=S batch vs S
   sequential runs, interleaved; outputs checked equal; ratio (0 = skip).
7. Paper 2 at scale (benchmarks/rounds.py on the device): one DFedAvgM round (K = 1 local step,
   ring gossip) of --resnet-m ResNet-18 clients (BatchNorm with per-client running statistics,
   vmap path) at batch --resnet-batch, batched (fp32, and precision=bf16: autocast with fp32
   master weights) vs the per-client loop (modules + torch.optim.SGD), ratio, peak memory, and the
   projected hours of the paper's 1000 rounds x K = 20 local steps (5 epochs of a 500-sample shard
   at batch 128; from the K = 1 round, so gossip is counted 20x: an upper bound). 0 = skip.
8. BatchNorm and bf16 on the device: ResNet-18, 3 clients, batch 4, float64: batched training
   gradients, updated running statistics and evaluation-mode logits against per-client modules
   (1e-9); precision=bf16 gradients against fp32 (within 5%).
9. Roofline map on the device (benchmarks/roofline.py, issue 13): one LeNet-5 step of --roofline-n
   nodes at batch --roofline-batch, batched and the fair per-node loop side by side, each phase's
   device time (profiler, kernels per aten op), FLOPs or bytes, rate and fraction of the in-run
   GEMM / copy calibration, plus the tick phases (send, average, correction, evaluation). 0 = skip.
10. Scaling sweep (issue 25): ``+experiment=scaling -m device=<dev> nodes=--scaling-n`` (VC and plain
   gossip on paper 1's baseline network, to N = 10,000) through the CLI, then ``vecgossip.report``:
   scaling.md / .csv / .png (reach tick, seconds per tick with the fitted exponent, peak memory
   beside memory.estimate) into $OUT/scaling/. Needs MNIST under $VECGOSSIP_DATA; skipped (said
   so) without it. 0 = skip.
5. Multi-GPU mode, when the machine has several GPUs: node sharding of --distributed-n LeNet nodes
   over 1, 2, 4, ... GPUs (torchrun + NCCL, benchmarks/distributed.py): seconds per tick, bytes
   each rank received, speedup; skipped on one GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from common import emit, header, interleaved, make_engine, round_parts, table
from loop import LoopClients, fastest_sgd
from vecgossip.engines.tick.buffer import Buffers, average_full
from vecgossip.network.mixing import SendOperator, adjacency
from vecgossip.models import get_model, make_forward
from vecgossip.core.optim import SGDConfig, loss_and_grad, sgd_update
from vecgossip.core.state import Layout, init_theta, new_state
from vecgossip.network.topology import random_regular

FLOP_PER_NODE_STEP = 3 * 2 * 64 * (24 * 24 * 20 * 25 + 8 * 8 * 50 * 500 + 800 * 500 + 500 * 10)  # fwd + 2x bwd
FLOOR_MS_N1000 = 13.0


def rounds_on(device: str, n: int, rounds: int = 3) -> torch.Tensor:
    layout = Layout.of(get_model("lenet").factory())
    g = torch.Generator().manual_seed(0)
    state = new_state(layout, init_theta(layout, n, "caffe_xavier", g).to(device))
    graph = random_regular(n, 4 if n > 4 else 2, 0)
    send = SendOperator(adjacency(graph), device)
    buf = Buffers.empty(n, layout.size, len(layout.weights), device)
    size = torch.from_numpy(graph.degrees()).float().to(device)
    fwd, cfg = make_forward("lenet"), SGDConfig()
    for _ in range(rounds):
        x = torch.rand(n, 64, 1, 28, 28, generator=g).to(device)
        y = torch.randint(0, 10, (n, 64), generator=g).to(device)
        _, grads = loss_and_grad(fwd, layout, state.theta, x, y)
        sgd_update(state.theta, state.momentum, grads, state.iters, layout, cfg)
        state.iters += 1
        a, c = send.select(None)
        buf.receive(a, c, state.theta, layout)
        average_full(state.theta, buf, size, 0.0, True, layout)
    return state.theta.cpu()


def loop_round_ms(n: int, device: str, reps: int) -> float:
    """The shared fair loop (benchmarks/loop.py): fused/foreach SGD measured, Caffe's bias-lr group,
    channels_last, default zero_grad."""
    model = get_model("lenet")
    layout = Layout.of(model.factory())
    theta = init_theta(layout, n, "caffe_xavier", torch.Generator().manual_seed(0)).to(device)
    x = torch.rand(n, 64, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (n, 64), device=device)
    impl, _ = fastest_sgd(model.factory, x[0], y[0], 0.9, True, bias_lr_mult=2.0)
    clients = LoopClients(model.factory, theta, 0.01, 0.9, 5e-4, impl, True, bias_lr_mult=2.0)

    def loop():
        for i in range(n):
            clients.step(i, x[i], y[i])
    return 1e3 * interleaved({"loop": loop}, reps=reps, device=device)["loop"]["median"]


def compression_check(dev: str, sizes: list[int], k: int, reps: int) -> dict:
    """Section 4: the one-kernel compressed delivery (engines/tick/masked_send.py) on ``dev`` equals
    its torch twin on the CPU for the same links and key (totals, layer variances: 1e-4 relative);
    then the per-slot send cost, compressed (p = 0.2) vs not."""

    import numpy as np

    from vecgossip.engines.tick.masked_send import deliver, plan_links
    layout = Layout.of(get_model("lenet").factory())
    n = 12
    theta = init_theta(layout, n, "caffe_xavier", torch.Generator().manual_seed(1))
    recv, send = SendOperator(adjacency(random_regular(n, 4, 0)), "cpu").edges(None)
    outs = []
    for d in ("cpu", dev):
        total, var = torch.zeros(n, layout.size, device=d), torch.zeros(n, len(layout.weights), device=d)
        count = torch.zeros(n, device=d)
        plan = plan_links(recv.numpy(), send.numpy(), np.arange(recv.numel()), n, torch.device(d), torch.float32)
        deliver(total, var, count, plan, theta.to(d), 0.2, 12345, layout, True)
        outs.append((total.cpu(), var.cpu()))
    rel = max(float((b - a).norm() / a.norm()) for a, b in zip(*outs))
    print(f"compression: one-kernel delivery {dev} vs cpu, max relative difference {rel:.2e} "
          f"({'OK' if rel < 1e-4 else 'FAIL'})", flush=True)
    rows = []
    for size in sizes:
        eng = make_engine(size, k, "lenet", dev)
        nodes = np.arange(size)
        plain, comp = (1.0, False), (0.2, False)       # (element send probability, variances kept)

        def sender(cfg):
            def fn():
                eng.transport.compression, eng.transport.variances = cfg
                eng.send_models(nodes, None, 0)
                eng.buffers.clear(nodes)
            return fn
        t = interleaved({"plain": sender(plain), "comp": sender(comp)}, reps=reps, device=dev)
        emit(rows, {"N": size, "k": k, "send_ms": 1e3 * t["plain"]["median"],
                    "comp_send_ms": 1e3 * t["comp"]["median"],
                    "comp/plain": t["comp"]["median"] / t["plain"]["median"]})
        eng = None
    return {"rel_err": rel, "sends": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--n", type=int, nargs="+", default=[50, 1000, 4000, 10000])
    ap.add_argument("--loop-n", type=int, nargs="+", default=[50, 200])
    ap.add_argument("--check-n", type=int, default=50)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--comp-n", type=int, nargs="+", default=[50, 1000])
    ap.add_argument("--distributed-n", type=int, default=4000,
                    help="with several GPUs: node sharding over 1, 2, ... all GPUs (NCCL) at this N "
                         "(benchmarks/distributed.py; 0 = skip)")
    ap.add_argument("--replicas", type=int, default=8, help="replicas in one batch vs sequential runs (0 = skip)")
    ap.add_argument("--replica-n", type=int, default=50)
    ap.add_argument("--replica-ticks", type=int, default=100)
    ap.add_argument("--resnet-m", type=int, default=100, help="ResNet-18 clients in one round (0 = skip)")
    ap.add_argument("--resnet-batch", type=int, default=128, help="ResNet-18 round: batch per client (section 7)")
    ap.add_argument("--roofline-n", type=int, default=1000, help="roofline map at this N (section 9; 0 = skip)")
    ap.add_argument("--roofline-batch", type=int, default=64)
    ap.add_argument("--scaling-n", type=int, nargs="+", default=[1000, 2000, 5000, 10000],
                    help="section 10: the scaling sweep's N values (0 = skip)")
    ap.add_argument("--scaling-ticks", type=int, default=1000, help="section 10: max_ticks of each run")
    a = ap.parse_args()
    dev = a.device
    print(header("GPU check: correctness vs CPU, round timings, loop baseline", dev), flush=True)
    result: dict = {"device": dev, "torch": torch.__version__}

    # 1. correctness
    if dev.startswith("cuda"):
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    cpu = rounds_on("cpu", a.check_n)
    other = rounds_on(dev, a.check_n)
    rel = float(((other - cpu).norm(dim=1) / cpu.norm(dim=1)).max())
    result["check_rel_err"] = rel
    print(f"correctness: {a.check_n} nodes, 3 rounds, max relative difference {dev} vs cpu = {rel:.2e} "
          f"({'OK' if rel < 1e-3 else 'FAIL'})", flush=True)
    if dev.startswith("cuda"):  # time with the library defaults
        torch.backends.cudnn.allow_tf32 = True

    # 2. rounds
    rows = []
    for n in a.n:
        eng = None
        try:
            eng = make_engine(n, a.k, "lenet", dev)
            med = round_parts(eng, a.reps, dev)
        except (torch.OutOfMemoryError, RuntimeError, ValueError) as err:  # report, keep going
            print(f"N={n}: {type(err).__name__}: {str(err)[:200]}", flush=True)
            rows.append({"N": n, "error": str(err)[:200]})
            continue
        finally:
            eng = None
            if dev.startswith("cuda"):
                torch.cuda.empty_cache()
        round_ms = med["train"] + med["send"] + med["average"] + med["correction"]
        p = 431_080
        state_bytes = n * p * 4 * (5 + (a.k + 1) + 3)  # SGD r/w, gossip reads + write, average r/w
        row = {"N": n, **{f"{k}_ms": v for k, v in med.items()}, "round_ms": round_ms,
               "train_TFLOP/s": n * FLOP_PER_NODE_STEP / (med["train"] / 1e3) / 1e12,
               "state_GB/s": state_bytes / (round_ms / 1e3) / 1e9, "us/node": 1e3 * round_ms / n}
        if dev.startswith("cuda"):
            row["peak_GB"] = torch.cuda.max_memory_allocated() / 2**30
            torch.cuda.reset_peak_memory_stats()
        emit(rows, row)
    result["rounds"] = rows

    # 3. loop baseline
    loops = []
    for n in a.loop_n:
        ms = loop_round_ms(n, dev, a.reps)
        loops.append({"N": n, "loop_train_ms": ms, "loop_us/node": 1e3 * ms / n})
        print(table([loops[-1]], list(loops[-1])), flush=True)
    result["loop"] = loops
    per_node_loop = min(r["loop_us/node"] for r in loops)
    print("\nsummary")
    for r in rows:
        if "round_ms" in r:
            r["speedup_vs_loop"] = per_node_loop / r["us/node"]
    print(table([r for r in rows if "round_ms" in r],
                ["N", "train_ms", "send_ms", "average_ms", "correction_ms", "round_ms", "eval_ms", "train_TFLOP/s",
                 "state_GB/s", "us/node", "speedup_vs_loop"]))
    result["compression"] = compression_check(dev, a.comp_n, a.k, a.reps)
    n1000 = [r for r in rows if r.get("N") == 1000 and "round_ms" in r]
    if n1000:
        print(f"N=1000 round {n1000[0]['round_ms']:.1f} ms (goal <= 40 ms; fp32 floor ~{FLOOR_MS_N1000} ms), "
              f"speedup vs loop {n1000[0]['speedup_vs_loop']:.1f}x (goal >= 20x)")
    if a.replicas:
        import replicas as replica_bench
        print(f"\nreplicas: {a.replicas} x N = {a.replica_n} in one batch vs sequential runs", flush=True)
        result["replicas"] = replica_bench.measure(a.replicas, a.replica_n, min(a.k, a.replica_n - 1),
                                                   a.replica_ticks, device=dev, reps=2)
    result["batchnorm"] = batchnorm_check(dev)
    if a.resnet_m:
        result["resnet_round"] = resnet_round(dev, a.resnet_m, a.resnet_batch, a.reps)
    if a.roofline_n:
        import roofline as roof
        print(f"\nroofline: LeNet-5 step of {a.roofline_n} nodes at batch {a.roofline_batch} on {dev}, batched vs "
              f"fair loop; tick phases", flush=True)
        result["roofline"] = roof.roofline(a.roofline_n, a.roofline_batch, min(a.k, a.roofline_n - 1), a.reps, dev)
    result["distributed"] = distributed_check(dev, a.distributed_n, a.k)
    result["scaling"] = scaling_sweep(dev, [n for n in a.scaling_n if n > 0], a.scaling_ticks, a.k)
    out = os.environ.get("OUT")
    if out:
        Path(out, "gpu_extended.json").write_text(json.dumps(result, indent=2))


def scaling_sweep(dev: str, sizes: list[int], ticks: int, k: int = 8) -> dict | None:
    """Section 10: the scaling preset's sweep on ``dev`` to the largest N, then its report."""
    from vecgossip.data.registry import check_available
    root = os.environ.get("VECGOSSIP_DATA", "data")
    if not sizes:
        return None
    try:
        check_available("mnist", root)
    except FileNotFoundError as err:
        print(f"\nscaling sweep: skipped (no MNIST: {str(err)[:120]})", flush=True)
        return {"skipped": "no MNIST"}
    out = Path(os.environ.get("OUT") or tempfile.mkdtemp()) / "scaling"
    print(f"\nscaling sweep: N = {sizes} on {dev}, {ticks} ticks at most, into {out}", flush=True)
    repo = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "-m", "vecgossip", "+experiment=scaling", "-m", f"device={dev}",
           f"nodes={','.join(map(str, sizes))}", f"degree={k}", f"max_ticks={ticks}", f"data_root={root}",
           f"hydra.sweep.dir={out / 'runs'}"]
    proc = subprocess.run(cmd, cwd=repo, capture_output=True, text=True)
    print(proc.stdout[-3000:], proc.stderr[-2000:], flush=True)
    rep = subprocess.run([sys.executable, "-m", "vecgossip.report", str(out / "runs"), "--out", str(out)], cwd=repo,
                         capture_output=True, text=True)
    md = (out / "scaling.md").read_text() if (out / "scaling.md").exists() else rep.stderr[-2000:]
    print(md, flush=True)
    return {"returncode": proc.returncode, "report": md}


def batchnorm_check(dev: str) -> dict:
    """Section 8: ResNet-18 with BatchNorm on the device: 3 clients, batch 4, 16x16 inputs, float64:
    the batched training gradients and updated running statistics, then the evaluation-mode logits,
    against per-client modules on the same device (1e-9); then precision=bf16's gradients against
    fp32's (within 5%)."""
    import torch.nn.functional as F

    from vecgossip.models import build, make_forward
    from vecgossip.core.optim import loss_and_grad
    from vecgossip.core.state import flatten, load_flat
    shape, classes = (3, 16, 16), 10
    layout = Layout.of(build("resnet18", shape, classes, "batch"))
    theta = init_theta(layout, 3, "torch", torch.Generator().manual_seed(0)).to(dev)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(3, 4, *shape, generator=g).to(dev), torch.randint(0, classes, (3, 4), generator=g).to(dev)
    fwd = make_forward("resnet18", "vmap", shape, classes, "batch")
    th = theta.double()
    _, grads = loss_and_grad(fwd, layout, th, x.double(), y, factored=False)
    with torch.no_grad():
        logits = fwd(layout.views(th, buffers=True), x.double(), train=False)
    err, p0 = 0.0, layout.params_size
    for i in range(3):
        net = build("resnet18", shape, classes, "batch").to(dev).double()
        load_flat(net, layout, theta[i].double())
        F.cross_entropy(net(x[i].double()), y[i]).backward()
        for a, q in zip(grads, net.parameters()):
            err = max(err, float((a[i] - q.grad).norm() / q.grad.norm().clamp_min(1e-12)) if q.grad.norm() > 1e-6
                      else 0.0)
        err = max(err, float((th[i, p0:] - flatten(net)[p0:]).abs().max() / flatten(net)[p0:].abs().max()))
        with torch.no_grad():
            ref = net.eval()(x[i].double())
        err = max(err, float((logits[i] - ref).norm() / ref.norm()))
    grads32 = loss_and_grad(fwd, layout, theta.clone(), x, y, factored=False)[1]
    bf16 = make_forward("resnet18", "vmap", shape, classes, "batch", "bf16")
    grads16 = loss_and_grad(bf16, layout, theta.clone(), x, y, factored=False)[1]
    rel16 = (sum(float((a - b).square().sum()) for a, b in zip(grads16, grads32))
             / sum(float(b.square().sum()) for b in grads32)) ** 0.5
    print(f"batchnorm: ResNet-18 on {dev}, batched vs per-client modules (float64, train + eval): max relative "
          f"difference {err:.1e} ({'OK' if err < 1e-9 else 'FAIL'}); bf16 vs fp32 gradients {rel16:.1e} "
          f"({'OK' if rel16 < 5e-2 else 'FAIL'})", flush=True)
    return {"rel_err_float64": err, "bf16_grad_rel": rel16}


def resnet_round(dev: str, m: int, batch: int, reps: int) -> dict:
    """Section 7: a DFedAvgM round of m ResNet-18 clients, batched vs the per-client loop."""
    import rounds as rounds_bench
    print(f"\nResNet-18 round: {m} clients, batch {batch}, K = 1, ring", flush=True)
    if dev.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    try:
        batched, loops, impl, eng = rounds_bench.setup(m, "resnet18", batch, 1, "dfedavgm", device=dev,
                                                       exec_mode="batched")
        per_client = rounds_bench.setup(m, "resnet18", batch, 1, "dfedavgm", device=dev, exec_mode="per_client")[0]
        auto = rounds_bench.setup(m, "resnet18", batch, 1, "dfedavgm", device=dev, exec_mode="auto")[3].execution
        print(f"model.exec=auto picks {auto.train} ({auto.how}; probe ms per client-step {auto.train_ms})", flush=True)
        bf16 = rounds_bench.setup(m, "resnet18", batch, 1, "dfedavgm", device=dev, precision="bf16",
                                  exec_mode="batched")[0]
        t = interleaved({"batched": batched, "per_client": per_client, "batched_bf16": bf16,
                         "loop": loops["loop_flat"]}, reps=max(1, reps - 1), device=dev)
    except (torch.OutOfMemoryError, RuntimeError) as err:      # report, keep going
        print(f"ResNet-18 round: {type(err).__name__}: {str(err)[:300]}", flush=True)
        return {"m": m, "error": str(err)[:300]}
    row = {"m": m, "batch": batch, "chunk": eng.train_chunk, "loop_sgd": impl,
           "batched_s": t["batched"]["median"], "per_client_s": t["per_client"]["median"], "auto_picks": auto.train,
           "loop_s": t["loop"]["median"],
           "speedup": t["loop"]["median"] / t["batched"]["median"],
           "batched_bf16_s": t["batched_bf16"]["median"],
           "hours_1000_rounds_K20": t["batched"]["median"] * 20 * 1000 / 3600,
           "hours_1000_rounds_K20_bf16": t["batched_bf16"]["median"] * 20 * 1000 / 3600}
    if dev.startswith("cuda"):
        row["peak_GB"] = torch.cuda.max_memory_allocated() / 2**30
    print(table([row], list(row)), flush=True)
    return row


def distributed_check(dev: str, n: int, k: int) -> list | None:
    """Multi-GPU mode: when this machine has several GPUs, shard N = ``n`` LeNet nodes over 1, 2,
    4, ... of them with torchrun + NCCL (benchmarks/distributed.py) and keep its rows."""
    count = torch.cuda.device_count() if dev.startswith("cuda") else 0
    if n <= 0 or count < 2:
        print(f"\nnode sharding: skipped ({count} GPU(s); it needs 2 or more)", flush=True)
        return None
    ranks = [g for g in (1, 2, 4, 8, 16) if g <= count]
    with tempfile.TemporaryDirectory() as tmp:
        rows = Path(tmp) / "distributed.json"
        subprocess.run([sys.executable, str(Path(__file__).with_name("distributed.py")), "--device", "cuda",
                        "--nodes", str(n), "--degree", str(k), "--ranks", *map(str, ranks), "--json", str(rows)],
                       check=False)
        return json.loads(rows.read_text()) if rows.exists() else None


if __name__ == "__main__":
    main()
