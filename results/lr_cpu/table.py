"""results/lr_cpu/table.md from the committed runs: per run the SGD step lr / (1 - momentum), how
many of the 8 clients diverged and the final accuracies (a diverged client counts as 0).

    python results/lr_cpu/table.py
"""
import json
from pathlib import Path

from vecgossip.core.files import atomic_path

HERE = Path(__file__).resolve().parent
rows = ["| method | optim.lr | momentum | step lr / (1 - momentum) | clients diverged (of 8) | local accuracy mean / worst | x_bar accuracy |",
        "|---|---|---|---|---|---|---|"]
runs = []
for path in sorted((HERE / "runs").glob("*/summary.json")):
    s = json.loads(path.read_text())
    opt = s["config"]["optim"]
    runs.append((s["method"], opt["lr"], opt["momentum"], s))
for method, lr, m, s in sorted(runs, key=lambda r: (r[0], -r[1])):
    f = s["final"]
    rows.append(f"| {method} | {lr:g} | {m:g} | {lr / (1 - m):.2g} | {s['clients_diverged']} | "
                f"{100 * f['acc_mean']:.1f} / {100 * f['acc_min']:.1f} | {100 * f['xbar_acc']:.1f} |")
with atomic_path(HERE / "table.md") as tmp:
    tmp.write_text("\n".join(rows) + "\n")
print((HERE / "table.md").read_text())
