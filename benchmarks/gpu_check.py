"""The first call on a lent GPU (issue 46): one safe run of at most 8 minutes that gives the
mission's headline table, whatever goes wrong in one part of it.

    bash benchmarks/pack_data.sh             # here, once: .gpudata/mnist.tar.gz (git-ignored, ~11 MB)
    # on the device (carry .gpudata; timeout_s 560 leaves the run its 8 minutes):
    tar xzf .gpudata/mnist.tar.gz -C /tmp && VECGOSSIP_DATA=/tmp/data python benchmarks/gpu_check.py --out $OUT
    python benchmarks/gpu_check.py --device cpu --small --out /tmp/gc    # a CPU rehearsal at tiny sizes

Sections, in order, each in its own process under its own time cap (``--cap NAME=SECONDS``), the
whole under ``--budget`` (480 s): a section that overruns is cut and the next one starts; what it
wrote before the cut stays.

* ``env``: device, memory, versions, the float32 math settings;
* ``correctness``: three synchronous rounds of LeNet nodes (train, send, Eq. 1, variance
  correction) on the device against the CPU in IEEE float32 (1e-3 relative), and the one-kernel
  compressed delivery against its CPU twin (buffer sums bit for bit);
* ``launches``: kernel-launching ops and host syncs of one step on the device's own paths
  (benchmarks/launches.py's rows: VC and TL + compression at N = 50, D-PSGD on LeNet);
* ``tick_speed``: seconds per tick at N = 1000 (k = 8, T_acq 10, every link; evaluation every 10
  ticks as in Table I) for VC and TL + compression, and one step without evaluation;
* ``loop``: the fair per-node loop (benchmarks/loop.py's clients: fused/foreach SGD) on the same
  device: its cost per node-step, so the ratio to the batched step at N = 1000;
* ``memory``: VC at N = 10,000: peak device memory against the estimate, the largest N that fits;
* ``table1_vc``: a Table I VC cell (N = 50, k = 8, T_acq 10, R 1, IID, seed 0) run to "most
  reach 90%": its ticks and wall time;
* ``precision``: one LeNet step of 1000 nodes: tf32 vs fp32 (explicit path), bf16 vs fp32 (vmap path);
* ``clock_tick``: the tick engine in seconds at N = 1000 (gossip, 6-regular, MLP, DivShare's links,
  steps of mean 1 s, 0.5 s windows: benchmarks/clock_tick.py's setting, issue 56): host seconds a
  virtual second, the transfers' share (the CPU's: 0.44 s, 5%, results/clock_scale_cpu/).

Output in ``--out`` (default $OUT): ``gpu_check.jsonl`` (one JSON object a line, each result as it
lands, then a line per section: status ok | cut | failed | skipped and its seconds),
``gpu_check.log`` (everything printed) and ``gpu_check.md`` (the headline table, rewritten after
every section). Nothing is checkpointed; no section needs another. MNIST comes from
$VECGOSSIP_DATA (a section that needs it and finds none is skipped, said so)."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
SKIPPED = 3                     # a child's exit code: the section could not run here (said why)
CAPS = {"env": 20, "correctness": 45, "launches": 60, "tick_speed": 110, "loop": 40, "memory": 60,
        "table1_vc": 90, "precision": 40, "clock_tick": 40}


class Emit:
    """Appends ``{"section": name, ...}`` lines to the JSONL file, flushed at once."""

    def __init__(self, path: Path, section: str) -> None:
        self.path, self.section = path, section

    def __call__(self, **row) -> None:
        line = json.dumps({"section": self.section, **row}, default=float)
        with self.path.open("a") as f:
            f.write(line + "\n")
        print(f"[{self.section}] {json.dumps(row, default=float)}", flush=True)


def sync(device) -> None:
    import torch
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn, device, reps: int = 5) -> float:
    """Median seconds of ``reps`` calls after one warm-up, the device synchronized around each."""
    import statistics
    fn()
    sync(device)
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync(device)
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def need_mnist() -> str:
    from vecgossip.data.registry import load
    root = os.environ.get("VECGOSSIP_DATA")
    try:
        load("mnist", root, True, False, "cpu", 0, None)
    except FileNotFoundError:
        print(f"skipped: no MNIST under VECGOSSIP_DATA={root!r} (benchmarks/pack_data.sh packs it)", flush=True)
        sys.exit(SKIPPED)
    return root


# -- sections -----------------------------------------------------------------------------------------
def env(a, emit) -> None:
    import torch
    dev = torch.device(a.device)
    row = {"torch": torch.__version__, "device": a.device, "python": sys.version.split()[0]}
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        row.update(name=p.name, memory_gib=round(p.total_memory / 2**30, 1), capability=f"{p.major}.{p.minor}",
                   sms=p.multi_processor_count, cuda=torch.version.cuda,
                   matmul_fp32=torch.backends.cuda.matmul.fp32_precision, conv_fp32=torch.backends.cudnn.conv.fp32_precision)
    try:
        import triton
        row["triton"] = triton.__version__
    except ImportError:
        row["triton"] = None
    emit(**row)


def correctness(a, emit) -> None:
    import numpy as np
    import torch
    from vecgossip.core.optim import SGDConfig, loss_and_grad, sgd_update
    from vecgossip.core.state import Layout, init_theta, new_state
    from vecgossip.engines.tick.buffer import Buffers, average_full
    from vecgossip.engines.tick.masked_send import deliver, plan_links
    from vecgossip.models import get_model, make_forward
    from vecgossip.network.mixing import SendOperator, adjacency
    from vecgossip.network.topology import random_regular
    from vecgossip.runtime.precision import float32_math
    n = 6 if a.small else 16
    layout = Layout.of(get_model("lenet").factory())
    graph = random_regular(n, 4, 0)

    def rounds(device):
        g = torch.Generator().manual_seed(0)
        state = new_state(layout, init_theta(layout, n, "caffe_xavier", g).to(device))
        send = SendOperator(adjacency(graph), device)
        buf = Buffers.empty(n, layout.size, len(layout.weights), device)
        size = graph.degrees().astype(np.float64)
        fwd, cfg = make_forward("lenet"), SGDConfig()
        for _ in range(3):
            x = torch.rand(n, 64, 1, 28, 28, generator=g).to(device)
            y = torch.randint(0, 10, (n, 64), generator=g).to(device)
            _, grads = loss_and_grad(fwd, layout, state.theta, x, y)
            sgd_update(state.theta, state.momentum, grads, state.iters, layout, cfg)
            state.iters += 1
            a_sub, counts = send.select(None)
            buf.receive(a_sub, counts, state.theta, layout)
            average_full(state.theta, buf, size, 0.0, True, layout)
        return state.theta.cpu()
    with float32_math("fp32", torch.device(a.device)):
        ref, got = rounds("cpu"), rounds(a.device)
    rel = float((got - ref).norm() / ref.norm())
    emit(check="three VC rounds, device vs CPU", nodes=n, rel_diff=rel, ok=rel < 1e-3)
    theta = init_theta(layout, n, "caffe_xavier", torch.Generator().manual_seed(1))
    recv, snd = SendOperator(adjacency(graph), "cpu").edges(None)
    outs = []
    for d in ("cpu", a.device):
        total, var, cnt = (torch.zeros(n, layout.size, device=d), torch.zeros(n, len(layout.weights), device=d),
                           torch.zeros(n, device=d))
        plan = plan_links(recv.numpy(), snd.numpy(), np.arange(recv.numel()), n, torch.device(d), torch.float32)
        deliver(total, var, cnt, plan, theta.to(d), 0.2, 12345, layout, True)
        outs.append((total.cpu(), var.cpu()))
    same = bool(torch.equal(outs[0][0], outs[1][0]))
    var_rel = float((outs[1][1] - outs[0][1]).norm() / outs[0][1].norm())
    emit(check="compressed delivery (p 0.2), device kernel vs CPU twin", links=int(recv.numel()),
         sums_bit_equal=same, var_rel_diff=var_rel, ok=same and var_rel < 1e-5)


def launches(a, emit) -> None:
    need_mnist()
    import launches as bench
    from contextlib import nullcontext
    from vecgossip.core.device import force_gpu_paths
    forced = force_gpu_paths if a.device == "cpu" else nullcontext
    rows = {"vc_n50": bench.ROWS["vc_n50"], "tlc_n50_k8": bench.ROWS["tlc_n50_k8"],
            "tlc_n50_k32": bench.ROWS["tlc_n50_k32"], "dpsgd_lenet": bench.ROWS["dpsgd_lenet"]}
    for name, row in rows.items():
        if a.small:
            row = bench.smaller(row)
        got = (bench.tick_row if row.engine == "tick" else bench.round_row)(row, a.device, forced)
        c = got["counts"]
        emit(row=row.label, ops=c.ops, kernels=c.kernels, syncs=c.syncs, sync_sites=dict(c.sites))


def tick_speed(a, emit) -> None:
    need_mnist()
    import torch
    from vecgossip.engines.group import Group
    from vecgossip.engines.tick.clock import TickClock
    from vecgossip.engines.tick.training import train_due
    n, ticks = (16, 20) if a.small else (1000, 200)
    for method in ("vc", "tl_compression"):
        eng = engine(a, method, [f"nodes={n}", "degree=8" if not a.small else "degree=4", "t_acq=10",
                                 f"max_ticks={ticks + 20}"])
        group = Group([eng])
        clock = TickClock(group)
        live = clock.begin(group)
        t = 0
        while t < 10:                                   # tick 0: warm-up (every node acts)
            t, _ = clock.step(group, t, live)
        sync(a.device)
        start, t0 = time.perf_counter(), t
        while t < t0 + ticks and live:
            t, _ = clock.step(group, t, live)
        sync(a.device)
        per_tick = (time.perf_counter() - start) / (t - t0)

        now = [t]                                       # every node acts at t, t + 10, ...

        def step():                                     # one T_acq period without evaluation
            for s, due, bad, online in train_due(group, now[0], [0]):
                eng.after_training(now[0], due, bad, online)
            now[0] += 10
        emit(method=method, N=n, ticks=t - t0, s_per_tick=per_tick, step_s=timed(step, a.device, reps=3),
             acc_mean=group.hists[0].rows[-1]["acc_mean"],
             peak_gib=(torch.cuda.max_memory_allocated() / 2**30 if a.device.startswith("cuda") else None))


def loop(a, emit) -> None:
    import torch
    from loop import LoopClients, fastest_sgd
    from vecgossip.core.state import Layout, init_theta
    from vecgossip.models import get_model
    model = get_model("lenet")
    m = 4 if a.small else 32
    theta = init_theta(Layout.of(model.factory()), m, "caffe_xavier", torch.Generator().manual_seed(0)).to(a.device)
    x = torch.rand(m, 64, 1, 28, 28, device=a.device)
    y = torch.randint(0, 10, (m, 64), device=a.device)
    impl, _ = fastest_sgd(model.factory, x[0], y[0], 0.9, True, bias_lr_mult=2.0)
    clients = LoopClients(model.factory, theta, 0.01, 0.9, 5e-4, impl, True, bias_lr_mult=2.0)

    def all_nodes():
        for i in range(m):
            clients.step(i, x[i], y[i])
    per_node = timed(all_nodes, a.device, reps=3) / m
    flat = torch.zeros(theta.shape[1], device=a.device)
    add = timed(lambda: [flat.add_(theta[i % m]) for i in range(64)], a.device, reps=3) / 64
    emit(model="lenet", nodes_timed=m, sgd=impl, train_ms_per_node=1e3 * per_node, buffer_add_ms=1e3 * add,
         loop_period_s_N1000_k8=1000 * per_node + 8000 * add + 1000 * add)


def memory(a, emit) -> None:
    need_mnist()
    import torch
    from vecgossip.engines.group import Group
    from vecgossip.engines.tick.training import train_due
    from vecgossip.runtime import memory as mem
    n = 64 if a.small else 10_000
    dev = torch.device(a.device)
    mem.reset_peak(dev)
    run = compose(a, "vc", [f"nodes={n}", "degree=8", "t_acq=10"])
    est, how = mem.estimate(run)
    from vecgossip.composition import tick as setup
    eng = setup.build_engine(run)
    group = Group([eng])
    for t in (0, 10):
        for s, due, bad, online in train_due(group, t, [0]):
            eng.after_training(t, due, bad, online)
    eng.measure(10)
    sync(a.device)
    peak = mem.peak(dev)
    row = {"N": n, "peak_gib": None if peak is None else peak / 2**30, "estimate_gib": est / 2**30,
           "peak_over_estimate": None if peak is None else peak / est}
    if dev.type == "cuda" and peak:
        total = torch.cuda.get_device_properties(dev).total_memory
        row["largest_n_fits"] = int(0.9 * total / (peak / n))
    emit(**row)


def table1_vc(a, emit) -> None:
    root = need_mnist()
    import vecgossip
    over = ["nodes=8", "degree=4", "max_ticks=20"] if a.small else ["nodes=50", "degree=8", "max_ticks=3000"]
    res = vecgossip.run("vc", overrides=[*over, "t_acq=10", "R=1", "early_stop=true", f"device={a.device}", "seed=0",
                                         f"data_root={root}"])
    s = res.summary
    emit(cell="T_acq 10, R 1, N 50, k 8, VC IID, seed 0" if not a.small else "tiny", most_reach_tick=s.get("most_reach_tick"),
         wall_s=s.get("wall_seconds"), paper_ticks=550, cpu_ticks_mean="587 (3 seeds, results/paper1_cpu)")


def precision(a, emit) -> None:
    import torch
    from vecgossip.core.optim import loss_and_grad
    from vecgossip.core.state import Layout, init_theta
    from vecgossip.models import get_model, make_forward
    from vecgossip.runtime.precision import float32_math
    n, reps = (2, 1) if a.small else (1000, 3)
    dev = torch.device(a.device)
    layout = Layout.of(get_model("lenet").factory())
    theta = init_theta(layout, n, "caffe_xavier", torch.Generator().manual_seed(0)).to(dev)
    x, y = torch.rand(n, 64, 1, 28, 28, device=dev), torch.randint(0, 10, (n, 64), device=dev)
    row = {"N": n}
    for impl, modes in (("explicit", ("fp32", "tf32")), ("vmap", ("fp32", "bf16"))):
        for mode in modes:
            fwd = make_forward("lenet", impl, precision=mode)
            with float32_math(mode, dev):
                row[f"{impl}_{mode}_ms"] = 1e3 * timed(lambda: loss_and_grad(fwd, layout, theta, x, y), dev, reps=reps)
    row["tf32_speedup"] = row["explicit_fp32_ms"] / row["explicit_tf32_ms"]
    row["bf16_speedup"] = row["vmap_fp32_ms"] / row["vmap_bf16_ms"]
    emit(**row)


def clock_tick(a, emit) -> None:
    """The tick engine in seconds on the device: 2 warm-up windows, then 12 (6 virtual seconds)."""
    need_mnist()
    import torch
    n = 30 if a.small else 1000
    slow = round(7 * n / 60)
    eng = engine(a, "gossip", [f"nodes={n}", "degree=6", "model=mlp", "max_ticks=100", "eval_every=1000",
                               "clock.enabled=true", "clock.compute.model=lognormal", "clock.compute.seconds=1.0",
                               "clock.compute.sigma=0.3", "clock.resolution=0.5",
                               f"clock.links.uplink=[{{nodes:{n - slow},mbps:60}},{{nodes:{slow},mbps:[10,13]}}]"])
    from common import TRANSFERS, time_calls
    flow = eng.transport.flow
    spent = time_calls(flow, TRANSFERS)                 # the clock's own host work
    for t in range(2):
        eng.tick(t)
    sync(a.device)
    spent[0], start = 0.0, time.perf_counter()
    for t in range(2, 14):
        eng.tick(t)
    sync(a.device)
    wall = time.perf_counter() - start
    emit(N=n, virtual_s=6.0, host_s_per_virtual_s=wall / 6.0, transfers_share=spent[0] / wall,
         steps=int(eng.state.iters.sum()), in_flight=int(flow.sender.size),
         peak_gib=(torch.cuda.max_memory_allocated() / 2**30 if a.device.startswith("cuda") else None))


SECTIONS = {"env": env, "correctness": correctness, "launches": launches, "tick_speed": tick_speed, "loop": loop,
            "memory": memory, "table1_vc": table1_vc, "precision": precision, "clock_tick": clock_tick}


def compose(a, method: str, over: list[str]):
    import vecgossip
    from vecgossip.composition.root import validate
    root = os.environ.get("VECGOSSIP_DATA")
    return validate(vecgossip.compose(method, overrides=[*over, f"device={a.device}", "progress=false",
                                                         *([f"data_root={root}"] if root else [])])).first


def engine(a, method: str, over: list[str]):
    """A tick engine of ``method``; the transfer-learning peer rule starts with every planned peer."""
    from vecgossip.composition import tick as setup
    eng = setup.build_engine(compose(a, method, over))
    if eng.algorithm.peer_rule:
        eng.links.active[:] = eng.links.planned
        eng.rewire()
    return eng


# -- the parent: each section a child process under its cap ---------------------------------------------
def headline(jsonl: Path) -> str:
    rows = [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()]
    out = ["| section | status | s | result |", "|---|---|---|---|"]
    for end in (r for r in rows if "status" in r):
        got = [r for r in rows if r["section"] == end["section"] and "status" not in r]
        text = "; ".join(", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items()
                                   if k not in ("section", "sync_sites")) for r in got)
        out.append(f"| {end['section']} | {end['status']} | {end['seconds']:.0f} | {text or end.get('note', '')} |")
    return "\n".join(out) + "\n"


def run_section(name: str, cap: float, argv: list[str], log) -> tuple[str, str]:
    proc = subprocess.Popen([sys.executable, "-u", __file__, "--section", name, *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    tail: list[str] = []

    def pump():
        for line in proc.stdout:
            log.write(line)
            log.flush()
            print(line, end="", flush=True)
            tail[:] = (tail + [line.strip()])[-3:]
    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        rc = proc.wait(timeout=cap)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        reader.join(5)
        return "cut", f"over its {cap:.0f} s cap"
    reader.join(5)
    if rc == 0:
        return "ok", ""
    return ("skipped" if rc == SKIPPED else "failed"), " | ".join(tail)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default=None, help="cuda when there is one, else cpu")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "gpu_check_out"))
    ap.add_argument("--small", action="store_true", help="tiny sizes (a CPU rehearsal)")
    ap.add_argument("--budget", type=float, default=480.0, help="seconds for every section together")
    ap.add_argument("--cap", action="append", default=[], metavar="NAME=SECONDS", help="a section's own cap")
    ap.add_argument("--only", nargs="+", choices=list(SECTIONS), help="these sections only")
    ap.add_argument("--section", choices=list(SECTIONS), help=argparse.SUPPRESS)   # a child's
    a = ap.parse_args()
    if a.device is None:
        import torch
        a.device = "cuda" if torch.cuda.is_available() else "cpu"
    a.out.mkdir(parents=True, exist_ok=True)
    jsonl = a.out / "gpu_check.jsonl"
    if a.section:                                       # a child: one section
        SECTIONS[a.section](a, Emit(jsonl, a.section))
        return
    caps = dict(CAPS)
    for c in a.cap:
        k, v = c.split("=")
        caps[k] = float(v)
    jsonl.write_text("")
    argv = ["--device", a.device, "--out", str(a.out)] + (["--small"] if a.small else [])
    start = time.perf_counter()
    with (a.out / "gpu_check.log").open("w") as log:
        for name in a.only or list(SECTIONS):
            left = a.budget - (time.perf_counter() - start)
            t = time.perf_counter()
            if left < 10:
                status, note = "skipped", "no time left in the budget"
            else:
                status, note = run_section(name, min(caps[name], left), argv, log)
            took = time.perf_counter() - t
            Emit(jsonl, name)(status=status, seconds=round(took, 1), note=note)
            (a.out / "gpu_check.md").write_text(headline(jsonl))
            log.write(f"== {name}: {status} in {took:.1f} s {note}\n")
    print(f"\n{headline(jsonl)}\ntotal {time.perf_counter() - start:.0f} s; files in {a.out}", flush=True)


if __name__ == "__main__":
    main()
