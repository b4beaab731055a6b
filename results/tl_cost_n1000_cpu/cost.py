"""Per-tick wall time of TL + compression beside VC at N = 1000, and what Table I's TL half would cost.

    python results/tl_cost_n1000_cpu/cost.py results/tl_cost_n1000_cpu/runs > results/tl_cost_n1000_cpu/cost.md

method=compression stands for TL + compression's steady state: TL starts every node with no peers and
adds them one per 50 ticks, so its first ticks gossip nothing and would understate the cost; once
its planned peers are in, its per-tick work is compression's. The tick counts are the paper's (Table I, ../shared/REFERENCE.md): a lower bound on what a faithful run
needs, since our VC cells reach "most 90%" within ~0.5-1x the paper's ticks but nothing says TL does.
"""
import json
import sys
from pathlib import Path

# (T_acq, R, k): (TL+compression IID, TL+compression alpha 0.5), N = 1000 rows of Table I.
PAPER_TL = {("10", 1, 8): (2810, 5820), ("10", 1, 32): (2710, 5490), ("10", 4, 8): (4470, 9470),
            ("10", 4, 32): (4360, 8780), ("1-19", 1, 8): (2770, 5950), ("1-19", 1, 32): (2600, 5860),
            ("1-19", 4, 8): (4470, 9060), ("1-19", 4, 32): (4100, 8640)}


FULL_VC = Path(__file__).resolve().parent.parent / "paper1_n1000_cpu" / "runs"   # whole VC runs, (10, 1, k) IID


def main(root: Path) -> None:
    full = {}
    for k in (8, 32):
        s = json.loads((FULL_VC / f"t10_R1_k{k}_anull" / "0" / "summary.json").read_text())
        full[k] = (s["wall_seconds"] / s["ticks_run"], s["ticks_run"])
    per_tick = {}
    for p in sorted(root.rglob("summary.json")):
        s = json.loads(p.read_text())
        per_tick[(s["method"], s["config"]["degree"])] = (s["wall_seconds"] / s["ticks_run"], s["ticks_run"])
    print("# TL + compression at N = 1000: per-tick cost and the CPU time Table I's TL half would take\n")
    print("Measured by `bash results/tl_cost_n1000_cpu/make.sh` (N = 1000, IID, T_acq 10, R 1, 40 ticks, "
          "no early stop, 1 thread; wall time includes start-up and the every-10-ticks evaluation).\n")
    print("| method | k | ticks | s per tick |\n|---|---|---|---|")
    for (m, k), (spt, n) in sorted(per_tick.items()):
        print(f"| {m} | {k} | {n} | {spt:.2f} |")
    ratio = {k: per_tick[("compression", k)][0] / per_tick[("vc", k)][0] for k in (8, 32)}
    est = {k: ratio[k] * full[k][0] for k in (8, 32)}
    print("\nThe first 40 ticks cost less per tick than a whole run (why was not measured): the whole "
          "VC runs of the same cells (`results/paper1_n1000_cpu/runs/t10_R1_k*_anull`) took "
          + ", ".join(f"{full[k][0]:.2f} s per tick at k = {k} ({full[k][1]} ticks)" for k in (8, 32))
          + ". The hours below are the measured ratio compression / VC times those whole-run costs: "
          + ", ".join(f"{est[k]:.2f} s per tick at k = {k}" for k in (8, 32)) + ".")
    print("\n| T_acq | R | k | paper ticks IID | paper ticks alpha 0.5 | hours IID | hours alpha 0.5 |")
    print("|---|---|---|---|---|---|---|")
    total = 0.0
    for (t, r, k), (iid, a05) in PAPER_TL.items():
        spt = est[k]
        h = (iid * spt / 3600, a05 * spt / 3600)
        total += sum(h)
        print(f"| {t} | {r} | {k} | {iid} | {a05} | {h[0]:.1f} | {h[1]:.1f} |")
    print(f"\nTotal: **{total:.0f} CPU-hours** on one core of this machine for the 16 TL cells, one seed "
          f"(TL + compression costs {ratio[8]:.2f}x (k 8) and {ratio[32]:.2f}x (k 32) VC's time per tick, and "
          "needs 4-5x VC's ticks in the paper).")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
