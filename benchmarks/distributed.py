"""Node sharding (vecgossip/runtime/shard.py) measured: G ranks under torchrun vs one, side by side.

    python benchmarks/distributed.py                                  # CPU: G = 1, 2 (gloo)
    python benchmarks/distributed.py --engine rounds --nodes 64       # paper 2: DFedAvgM rounds, CIFAR CNN
    python benchmarks/distributed.py --ranks 1 2 4 8 --device cuda --nodes 4000 --degree 32   # GPUs (NCCL)

For every (topology, G, exchange) it launches ``torchrun --standalone --nproc-per-node=G`` on this
script (``--worker``), which builds the tick engine from the config, runs ``--ticks`` ticks after
a warm-up tick (``--engine rounds``: rounds of DFedAvgM with one local step on the CIFAR CNN) and
reports, from rank 0: seconds per tick (or round) (all ranks step together: the collectives
synchronise them), model bytes each rank received from the others per tick, and the speedup over
G = 1. On a CPU each rank gets cores // G threads (the G = 1 run all of them), so the comparison
is the same machine split G ways. Results go to stdout and, with ``--json``, to a file.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import header, summary, table  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def worker(a) -> None:
    import torch
    from hydra import compose, initialize_config_dir

    from vecgossip.config.load import load
    from vecgossip.runtime import shard
    from vecgossip.runtime.device import pick_device
    from vecgossip.composition import rounds as round_setup
    from vecgossip.composition import tick as tick_setup

    topology, exchange = a.topology[0], a.exchange[0]
    overrides = [f"nodes={a.nodes}", f"topology={topology}", f"model={a.model}", f"device={a.device}",
                 f"t_acq={a.t_acq}", f"distributed.exchange={exchange}", "progress=false"]
    if a.engine == "rounds":
        overrides = [f"clients={a.nodes}", f"topology={topology}", "method=dfedavgm", "data=cifar10", "model=cnn",
                     f"device={a.device}", "local_steps=1", "local_epochs=null", f"distributed.exchange={exchange}",
                     "progress=false"]
    if topology in ("regular", "random"):
        overrides.append(f"degree={a.degree}")
    with initialize_config_dir(config_dir=str(REPO / "vecgossip" / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    rank, world, device = shard.start("auto", "auto", pick_device(a.device))
    run = load(cfg, overrides, world).first                   # the typed config the engine is built from
    sh = shard.Shard(run.cfg.topology.n, rank, world, exchange)
    eng = (round_setup if a.engine == "rounds" else tick_setup).build_engine(run, shard=sh)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()
        sh.sum_int(0)

    def report(bytes_before: float, start: float) -> None:
        """Rank 0 writes seconds and model MB received per timed tick (round) for the launcher."""
        sync()
        wall = time.perf_counter() - start
        if rank == 0:
            Path(a.worker).write_text(json.dumps({"s_per_tick": wall / a.ticks, "MB_in_per_tick":
                                                  (sh.bytes_in - bytes_before) / a.ticks / 1e6,
                                                  "threads": torch.get_num_threads(), "local_nodes": sh.size}))

    if a.engine == "rounds":
        def one_round(t: int) -> None:
            clients = eng.participants()
            eng.local_train(clients, eng.opt.lr_at(t))
            eng.communicate(t, clients)
        one_round(0)                                                        # warm-up
        sync()
        before, start = sh.bytes_in, time.perf_counter()
        for t in range(1, a.ticks + 1):
            one_round(t)
        report(before, start)
        return
    t, active = 0, 0
    while active < 1:                      # warm-up: the first tick where nodes train
        active += eng.tick(t)
        t += 1
    sync()
    before, start, active = sh.bytes_in, time.perf_counter(), 0
    while active < a.ticks:
        active += eng.tick(t)
        t = int(eng.next_train.min()) if active < a.ticks else t
    report(before, start)


def launch(a, ranks: int, exchange: str, topology: str) -> dict:
    cores = os.cpu_count() or 1
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    if a.device == "cpu":
        env["OMP_NUM_THREADS"] = str(max(1, cores // ranks))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
               __file__, "--worker", str(out), "--nodes", str(a.nodes), "--degree", str(a.degree),
               "--model", a.model, "--device", a.device, "--ticks", str(a.ticks), "--t-acq", a.t_acq,
               "--exchange", exchange, "--topology", topology, "--engine", a.engine]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            errors = [ln for ln in proc.stderr.splitlines() if "Error" in ln and "ChildFailed" not in ln]
            return {"error": (errors or ["failed"])[-1][:200]}
        return json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--engine", default="tick", choices=["tick", "rounds"],
                    help="rounds: --nodes clients of DFedAvgM (one local step, batch 128, CIFAR CNN); "
                         "--ticks rounds timed")
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--degree", type=int, default=8)
    ap.add_argument("--topology", nargs="+", default=["regular", "ring"])
    ap.add_argument("--exchange", nargs="+", default=["all_to_all", "all_gather"])
    ap.add_argument("--model", default="lenet")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--ticks", type=int, default=20, help="active ticks timed (ticks where nodes train)")
    ap.add_argument("--t-acq", default="[1,19]", help="T_acq: [1,19] = asynchronous (a tenth of the nodes per tick); 10 = all every 10th tick")
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a)
        return
    what = (f"{a.nodes} {a.model} nodes, T_acq={a.t_acq}, {a.ticks} active ticks" if a.engine == "tick" else
            f"{a.nodes} CIFAR-CNN clients, DFedAvgM one local step, {a.ticks} rounds")
    print(header(f"Node sharding ({a.engine} engine): {what} timed, G = {a.ranks}", a.device), flush=True)
    rows = []
    for topology in a.topology:
        base = None
        for g in a.ranks:
            for exchange in (a.exchange if g > 1 else a.exchange[:1]):
                r = launch(a, g, exchange, topology)
                row = {"topology": topology if topology == "ring" else f"{topology} k={a.degree}", "G": g,
                       "exchange": exchange if g > 1 else "-", **r}
                if "s_per_tick" in r:
                    base = r["s_per_tick"] if g == 1 else base
                    row["speedup"] = base / r["s_per_tick"] if base else None

                rows.append(row)
                print(table([row], list(row)), flush=True)
    unit = "active tick" if a.engine == "tick" else "round"
    summary(rows, f"seconds per {unit}; model MB each rank received per {unit}",
            ["topology", "G", "exchange", "threads", "local_nodes", "s_per_tick", "MB_in_per_tick", "speedup"])
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
