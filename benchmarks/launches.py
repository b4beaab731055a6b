"""Kernel launches and host syncs of one step (issue 46), counted with the GPU's code paths forced on
this machine (or a GPU's own paths with --device cuda):

    python benchmarks/launches.py                                  # the table (GPU paths, this CPU)
    python benchmarks/launches.py --rows vc_n50 dpsgd              # some rows
    python benchmarks/launches.py --native                         # this CPU's own paths
    python benchmarks/launches.py --device cuda --json out.json    # on a GPU

A row is one step outside evaluation: on the tick engine the tick on which the nodes act (one T_acq
period; steps 1-3 of the tick: train, send, merge, with the divergence guard noted on the device
as the clock keeps it between its reads), on the round engine one round (local work, guard,
communication). Columns: ``ops`` (outermost aten ops that launch a kernel), ``kernels`` (the
innermost ones: a closer estimate of launches), ``syncs`` (host syncs, each named by the line
that made it), ``eval`` (what the tick's evaluation adds, reported apart: it syncs by design).
Counting is vecgossip/runtime/launches.py. The tick rows train real MNIST batches (LeNet, paper 1's
baseline), the round rows CIFAR-10 (the FedAvg CNN, 16 clients): data from $VECGOSSIP_DATA.
The transfer-learning rows start with every planned peer added (the steady state of a run)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("KINETO_LOG_LEVEL", "5")       # the profiler's start/stop notes
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from common import header, table  # noqa: E402


@dataclass(frozen=True)
class Row:
    label: str
    method: str
    engine: str                 # tick | rounds
    overrides: tuple[str, ...]
    ticks: tuple[int, int] = (10, 20)   # tick rows: (warm-up tick, counted tick); tick 0 runs first
    per_iteration: bool = False         # round rows: also count K = 3 to split per local iteration


ROWS = {
    "vc_n50": Row("VC, N = 50, k = 8, T_acq 10", "vc", "tick", ("nodes=50", "degree=8", "t_acq=10")),
    "vc_n1000": Row("VC, N = 1000, k = 8, T_acq 10", "vc", "tick", ("nodes=1000", "degree=8", "t_acq=10")),
    "tlc_n50_k8": Row("TL + compression, N = 50, k = 8, T_acq 10", "tl_compression", "tick",
                      ("nodes=50", "degree=8", "t_acq=10")),
    "tlc_n50_k32": Row("TL + compression, N = 50, k = 32, T_acq 10", "tl_compression", "tick",
                       ("nodes=50", "degree=32", "t_acq=10")),
    "tlc_n1000_k8": Row("TL + compression, N = 1000, k = 8, T_acq [1,19], one tick", "tl_compression", "tick",
                        ("nodes=1000", "degree=8", "t_acq=[1,19]"), ticks=(1, 2)),
    "dpsgd": Row("D-PSGD round, CNN, 16 clients", "dpsgd", "rounds", ("clients=16", "model=cnn", "data=cifar10")),
    "dfedavgm": Row("DFedAvgM round, CNN, 16 clients", "dfedavgm", "rounds",
                    ("clients=16", "model=cnn", "data=cifar10"), per_iteration=True),
    "dpsgd_lenet": Row("D-PSGD round, LeNet, MNIST, 16 clients", "dpsgd", "rounds",
                       ("clients=16", "model=lenet", "data=mnist")),
}


def smaller(row: Row) -> Row:
    """The row at tiny sizes (a rehearsal: 8 nodes of degree 4, 4 clients)."""
    small = {"nodes": "nodes=8", "degree": "degree=4", "clients": "clients=4"}
    over = tuple(small.get(o.split("=")[0], o) for o in row.overrides)
    if row.engine == "rounds":
        over += ("degree=2",)
    return Row(row.label + " (tiny)", row.method, row.engine, over, row.ticks, row.per_iteration)


def compose(row: Row, device: str, extra: tuple[str, ...] = ()):
    import vecgossip
    from vecgossip.composition.root import validate
    data = os.environ.get("VECGOSSIP_DATA")
    over = [*row.overrides, f"device={device}", "progress=false", *([f"data_root={data}"] if data else []), *extra]
    return validate(vecgossip.compose(row.method, overrides=over)).first


def tick_row(row: Row, device: str, forced) -> dict:
    """Tick 0 on this machine's own paths (every node trains: the slow one), then the warm-up tick
    and the counted tick on the chosen paths."""
    from vecgossip.composition import tick as setup
    from vecgossip.engines.group import Group
    from vecgossip.engines.tick.clock import TickClock
    from vecgossip.engines.tick.training import train_due
    from vecgossip.runtime.launches import count
    run = compose(row, device)
    with forced():
        eng = setup.build_engine(run)          # chunk sizes as the device's paths choose them
    if eng.algorithm.peer_rule:                # the steady state: every planned peer added
        eng.links.active[:] = eng.links.planned
        eng.rewire()
    group = Group([eng])

    def step(t):
        for s, due, bad, online in train_due(group, t, [0]):
            eng.after_training(t, due, bad, online)
    with forced():
        clock = TickClock(group)               # the guard's watch as the clock keeps it on these paths
    step(0)
    warm, counted = row.ticks
    def evaluation():                          # what the clock adds at an evaluation tick
        if group.watch is not None:
            clock.settle(group, counted, [0])
        eng.measure(counted)
    with forced():
        step(warm)
        _, c = count(step, counted)
        _, ev = count(evaluation)
    return {"counts": c, "eval": ev, "guard_every": clock.guard_every}


def round_row(row: Row, device: str, forced, k: int | None = None) -> dict:
    """Round 0 (warm-up), then round 1 counted (not an evaluation round)."""
    from vecgossip.composition import rounds as setup
    from vecgossip.engines.group import Group
    from vecgossip.engines.rounds.clock import RoundClock
    from vecgossip.runtime.launches import count
    extra = () if k is None else (f"engine.local_steps={k}", "engine.local_epochs=null")
    run = compose(row, device, extra)
    with forced():
        eng = setup.build_engine(run)
        group = Group([eng])
        clock = RoundClock(group)
        live = clock.begin(group)
        clock.step(group, 0, live)
        _, c = count(clock.step, group, 1, live)
    return {"K": int(eng.steps.max()), "counts": c}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--native", action="store_true", help="this machine's own paths (default on a CPU: the GPU's)")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--json", type=Path, help="write every count (ops by name, sync sites) here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from vecgossip.core.device import force_gpu_paths
    gpu_paths = not args.native and args.device == "cpu"
    forced = force_gpu_paths if gpu_paths else nullcontext
    print(header("kernel launches and host syncs per step", args.device))
    print(f"paths: {'the GPU paths, forced on this CPU' if gpu_paths else 'this device own'}\n", flush=True)
    out, rows = {}, []
    for name in args.rows:
        row = ROWS[name]
        start = time.perf_counter()
        if row.engine == "tick":
            got = tick_row(row, args.device, forced)
            c, ev = got["counts"], got["eval"]
            line = {"row": row.label, "ops": c.ops, "kernels": c.kernels, "syncs": c.syncs,
                    "eval ops": ev.ops, "eval syncs": ev.syncs}
            out[name] = {"label": row.label, "step": c.as_dict(), "eval": ev.as_dict(), "guard_every": got["guard_every"]}
        else:
            got = round_row(row, args.device, forced)
            c = got["counts"]
            line = {"row": row.label + f" (K = {got['K']})", "ops": c.ops, "kernels": c.kernels, "syncs": c.syncs}
            out[name] = {"label": row.label, "K": got["K"], "round": c.as_dict()}
            if row.per_iteration:
                more = round_row(row, args.device, forced, k=3)["counts"]
                one = round_row(row, args.device, forced, k=1)["counts"]
                per = (more.ops - one.ops) / 2
                line["per local iteration"] = f"{per:.0f} ops, {(more.syncs - one.syncs) / 2:.0f} syncs"
                out[name]["per_iteration"] = {"ops": per, "syncs": (more.syncs - one.syncs) / 2,
                                              "fixed_ops": one.ops - per}
        line["s"] = round(time.perf_counter() - start, 1)
        rows.append(line)
        print(table([line], list(line)), flush=True)
        for site, k in c.sites.most_common():
            print(f"    sync x{k}: {site}")
    cols = ["row", "ops", "kernels", "syncs", "eval ops", "eval syncs", "per local iteration", "s"]
    print("\n| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r.get(k, "")) for k in cols) + " |")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
