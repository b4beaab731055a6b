"""Recompute the network DP block of every committed run's summary.json with the bound of issue 47
(vecgossip/privacy/network.py: the observer's whole view as one linear Gaussian mechanism), in place.

    python results/privacy_cpu/network.py results/privacy_cpu/runs
    python -m vecgossip.report results/privacy_cpu/runs --out results/privacy_cpu

The bound depends only on W (the topology), the gossip steps, sigma, the private rounds and delta,
all in each summary, not on what was trained: the runs are not repeated. Each recomputed block
says so (``recomputed``); the block it replaces is kept as ``superseded`` (the History page)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from vecgossip.core.files import write_json  # noqa: E402
from vecgossip.network.mixing import uniform_mixing  # noqa: E402
from vecgossip.network.topology import build  # noqa: E402
from vecgossip.privacy.network import network_epsilons  # noqa: E402


def main(root: Path) -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    done = 0
    for path in sorted(root.rglob("summary.json")):
        s = json.loads(path.read_text())
        p = s.get("privacy")
        old = (p or {}).get("network")
        if not p or old is None or "superseded" in old:
            continue
        if not old.get("epsilon_pair_max") and old.get("reported") is None:
            continue
        cfg = s["config"]
        t = cfg["topology"]
        w = uniform_mixing(build(t["name"], t["n"], t.get("k"), seed=cfg["seed"])).toarray()
        rounds = int(p["steps"]["max"])
        eps, local, how = network_epsilons(w, int(cfg["gossip_steps"]), float(p["noise_multiplier"]), rounds,
                                           float(p["delta"]))
        off = eps[~np.eye(len(eps), dtype=bool)]
        p["network"] = {"reported": True, "gossip_steps": int(cfg["gossip_steps"]), "rounds": rounds,
                        "epsilon_pair_max": float(off.max()), "epsilon_pair_mean": float(off.mean()),
                        "epsilon_local_unamplified": local, "bound": how,
                        "neighbouring": "one example of one client added or removed; the observer sees its "
                                        "neighbours' messages and its own model at every gossip step",
                        "recomputed": f"results/privacy_cpu/network.py at {commit} (from W, K, sigma, rounds, "
                                      "delta; the run was not repeated)",
                        "superseded": old}
        write_json(s, path)
        done += 1
        print(f"{path.parent}: pair mean {old.get('epsilon_pair_mean'):.3g} -> {off.mean():.3g}, "
              f"max {old.get('epsilon_pair_max'):.3g} -> {off.max():.3g} (local unamplified {local:.3g})", flush=True)
    print(f"{done} summaries recomputed")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
