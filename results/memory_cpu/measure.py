"""Memory estimate against the measured peak, every method preset at small size (issue 39): one
``python -m vecgossip method=M ...`` per preset in its own process (round engine: 16 clients, 2
rounds, 2 local steps where the preset allows them; tick engine: 20 nodes, 30 ticks), then
memory.csv from their summary.json (``memory.estimate_bytes``: what ``runtime.memory.estimate``
said before anything was allocated; ``memory.peak_bytes``: the process's peak resident set).

    VECGOSSIP_DATA=../shared/data python results/memory_cpu/measure.py [ROOT]    # default /work/mem

Finished presets (ROOT/<method>/summary.json) are not run again. tests/test_memory.py runs the
same commands (slow) and checks the committed memory.csv."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

from vecgossip.core.files import write_csv

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PRESETS = sorted(p.stem for p in (REPO / "vecgossip" / "conf" / "method").glob("*.yaml"))
TICK = {"adpsgd", "compression", "divshare", "el_async", "fedavg_tick", "gossip", "gossip_timers", "robust_gossip",
        "staleness_gossip", "swift", "tl", "tl_compression", "vc"}
BOUNDS = (0.8, 1.2)          # peak / estimate: the "within 20%"


def overrides(method: str) -> list[str]:
    """The small size of ``method``'s run."""
    if method in TICK:
        return ["nodes=20", "max_ticks=30", "eval_every=10", *(["topology=star"] if method == "fedavg_tick" else [])]
    return ["clients=16", "rounds=2", "eval_every=1"]


def run(method: str, run_dir: Path) -> dict:
    """Run ``method`` at small size into ``run_dir`` (unless done) and return its summary."""
    if not (run_dir / "summary.json").exists():
        env = {**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"}
        base = [sys.executable, "-m", "vecgossip", f"method={method}", *overrides(method), "progress=false",
                f"hydra.run.dir={run_dir}"]
        out = subprocess.run([*base, "local_steps=2", "local_epochs=null"], cwd=REPO, env=env,
                             capture_output=True, text=True)
        if out.returncode == 2:                       # a preset whose local steps are fixed: its own
            out = subprocess.run(base, cwd=REPO, env=env, capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"{method}: exit {out.returncode}: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads((run_dir / "summary.json").read_text())


def row(method: str, summary: dict) -> dict:
    mem = summary["memory"]
    return {"method": method, "engine": summary["engine"], "model": summary["config"]["model"]["name"],
            "estimate_bytes": mem["estimate_bytes"], "peak_bytes": mem["peak_bytes"],
            "peak_over_estimate": round(mem["peak_bytes"] / mem["estimate_bytes"], 3)}


def main(root: Path, only: list[str]) -> None:
    """Every preset (or ``only`` these, their rows replacing or joining memory.csv's others)."""
    kept = [] if not only else [r for r in pd.read_csv(HERE / "memory.csv").to_dict("records") if r["method"] not in only]
    rows = []
    for method in only or PRESETS:
        rows.append(row(method, run(method, root / method)))
        print(f"{method}: peak / estimate {rows[-1]['peak_over_estimate']}", flush=True)
    write_csv(pd.DataFrame(sorted(kept + rows, key=lambda r: r["method"])), HERE / "memory.csv")   # atomic


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/work/mem"), sys.argv[2:])
