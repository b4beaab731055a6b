"""Speed of the tick engine in virtual seconds (vecgossip/engines/tick/timed/, issue 48).

1. **Events per second against the per-event twin, on the same run**: gossip learning on a random
   6-regular graph of N nodes, MNIST-shaped synthetic images, the MLP, DivShare's links (7 in 60
   uplinks at 10-13 Mbit/s, the rest 60), 1 ms latency, steps of 0.5 s + 0.5 s x lognormal(0.3),
   0.5 s windows: the engine (batched waves on the stacked state) and tests/reference/gossip_seconds.py
   (one nn.Module per node, a Python list per buffer, the transfers' loop twin) run the same
   events (training steps + message deliveries), timed one after the other on this machine, and
   their models compared (float64).
2. **The cost of a long run at 1000 nodes**: the engine alone (float32) over a stretch of virtual
   seconds, host seconds per virtual second and the projection to 180,000 virtual seconds
   (Plexus's 50-hour setting), split into the clock's own host work (transfers) and the rest.

    python benchmarks/clock_tick.py --twin-nodes 30 --twin-seconds 20 --big-nodes 100 300 1000 --big-seconds 3 \\
        [--malloc tuned|default] --out results/clock_speed_cpu/clock_tick.json

The process runs under the glibc settings a ``python -m vecgossip`` run sets on a CPU
(``engine.malloc=tuned``, vecgossip/runtime/allocator.py) unless ``--malloc default``.
"""
from __future__ import annotations

import argparse
import dataclasses
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from common import TRANSFERS, apply_malloc, malloc_option, time_calls  # noqa: E402
from conftest import synthetic_dataset  # noqa: E402
import reference.gossip_seconds  # noqa: E402
from settings import TickSetting, tick_engine  # noqa: E402
from vecgossip.core.files import write_json  # noqa: E402
from vecgossip.core.optim import SGDConfig  # noqa: E402
from vecgossip.core.state import Layout, init_theta, new_state  # noqa: E402
from vecgossip.engines.clock.links import bandwidth  # noqa: E402
from vecgossip.engines.clock.config import ClockConfig  # noqa: E402
from vecgossip.engines.tick.timed.windows import Seconds  # noqa: E402
from vecgossip.models import get_model, make_forward  # noqa: E402
from vecgossip.network.peers import Links  # noqa: E402
from vecgossip.network.topology import random_regular  # noqa: E402


def clock_of(n: int, seed: int, element: int) -> Seconds:
    rng = np.random.default_rng([seed, 7, 0])
    step = 0.5 + 0.5 * np.exp(rng.normal(0, 0.3, n) - 0.045)      # mean 1 s, at least one window
    slow = round(7 * n / 60)
    cfg = ClockConfig(links={"uplink": [{"nodes": n - slow, "mbps": 60.0}, {"nodes": slow, "mbps": (10.0, 13.0)}]})
    up = bandwidth(cfg.links.uplink, n, np.random.default_rng([seed, 7, 1])) * element / 4   # float64: 2x bytes
    lat = np.full((n, n), 0.001)
    np.fill_diagonal(lat, 0.0)
    return Seconds(step, up, up, lat, "fair", 0.5)


def engine_of(n: int, seconds: int, dtype, seed: int = 0):
    layout = Layout.of(get_model("mlp").factory())
    data = dataclasses.replace(synthetic_dataset(2000), dtype=dtype)
    graph = random_regular(n, 6, seed)
    init = init_theta(layout, n, "caffe_xavier", torch.Generator().manual_seed(seed)).to(dtype)
    clock = clock_of(n, seed, torch.empty(0, dtype=dtype).element_size())
    cfg = TickSetting(batch_size=32, max_ticks=seconds, eval_every=10 ** 9, train_chunk=512)
    eng = tick_engine(cfg, new_state(layout, init.clone()), Links(graph), make_forward("mlp"), SGDConfig(), data,
                      None, data.batch(torch.arange(10))[0], data.labels[:10], torch.Generator().manual_seed(seed),
                      np.random.default_rng(seed), seconds=clock)
    return eng, (init, graph, data, cfg, clock, layout)


def run_engine(eng, seconds: int) -> dict:
    spent = time_calls(eng.transport.flow, TRANSFERS)          # the clock's own host work (the transfers)
    t0 = time.perf_counter()
    for t in range(int(seconds / eng.seconds.resolution)):
        eng.tick(t)
    wall = time.perf_counter() - t0
    steps = int(eng.state.iters.sum())
    delivered = int(eng.transport.received.sum())
    return {"wall": wall, "steps": steps, "deliveries": delivered, "events": steps + delivered,
            "transfers_seconds": spent[0], "in_flight": int(eng.transport.flow.sender.size)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--twin-nodes", type=int, default=30)
    ap.add_argument("--twin-seconds", type=int, default=20)
    ap.add_argument("--big-nodes", type=int, nargs="+", default=[100, 300, 1000])
    ap.add_argument("--big-seconds", type=int, default=30)
    ap.add_argument("--out", type=Path, default=None)
    malloc_option(ap)
    a = ap.parse_args()
    malloc = apply_malloc(a.malloc)
    print(malloc, flush=True)
    torch.set_num_threads(torch.get_num_threads())
    eng, (init, graph, data, cfg, clock, _) = engine_of(a.twin_nodes, a.twin_seconds, torch.float64)
    e = run_engine(eng, a.twin_seconds)
    t0 = time.perf_counter()
    want, iters, _ = reference.gossip_seconds.run(init, graph, data, None, cfg, 1, 0, 2 * a.twin_seconds,
                                                  list(clock.step_seconds), list(clock.uplink), list(clock.downlink),
                                                  clock.latency.tolist(), eng.transport.message_bytes, "fair", 0.5)
    twin_wall = time.perf_counter() - t0
    rel = float(((eng.state.theta - want).norm(dim=1) / want.norm(dim=1)).max())
    twin = {"nodes": a.twin_nodes, "virtual_seconds": a.twin_seconds, "events": e["events"],
            "engine_seconds": e["wall"], "twin_seconds": twin_wall, "engine_events_per_s": e["events"] / e["wall"],
            "twin_events_per_s": e["events"] / twin_wall, "speedup": twin_wall / e["wall"], "max_rel_diff": rel,
            "same_steps": eng.state.iters.tolist() == iters}
    print(f"twin run, {a.twin_nodes} nodes, {a.twin_seconds} virtual s, {e['events']} events: engine {e['wall']:.2f} s "
          f"({twin['engine_events_per_s']:.0f} events/s), per-event twin {twin_wall:.2f} s "
          f"({twin['twin_events_per_s']:.0f} events/s): {twin['speedup']:.1f}x; models agree to {rel:.1e}", flush=True)
    big = []
    for n in a.big_nodes:
        big_eng, _ = engine_of(n, a.big_seconds, torch.float32)
        b = run_engine(big_eng, a.big_seconds)
        per = b["wall"] / a.big_seconds
        big.append({"nodes": n, "virtual_seconds": a.big_seconds, **b, "host_seconds_per_virtual_second": per,
                    "projected_host_hours_180000": per * 180_000 / 3600,
                    "transfers_share": b["transfers_seconds"] / b["wall"]})
        print(f"{n} nodes, {a.big_seconds} virtual s: {b['wall']:.1f} s on the host ({per:.2f} s a virtual s, "
              f"{100 * big[-1]['transfers_share']:.0f}% in the transfers), {b['events']} events, {b['in_flight']} in "
              f"flight at the end -> 180,000 virtual s ~ {big[-1]['projected_host_hours_180000']:.0f} host hours",
              flush=True)
        if a.out:          # after each size: a long one stopped by a timeout keeps the others
            write_json({"machine": platform.processor() or platform.machine(), "malloc": malloc,
                        "torch_threads": torch.get_num_threads(), "twin": twin, "big": big}, a.out)


if __name__ == "__main__":
    main()
