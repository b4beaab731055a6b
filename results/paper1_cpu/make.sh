#!/usr/bin/env bash
# Paper 1 at N = 50 on a CPU: the Table I cells README cites, three seeds of the first VC cell,
# FedAvg (Fig. 8), and the baseline's plateau (Fig. 2) for 3000 ticks; then the report, and a
# copy of every job's summary.json, metrics.csv and overrides beside it.
#   VECGOSSIP_DATA=../shared/data bash results/paper1_cpu/make.sh [SWEEP_ROOT]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=${1:-runs/paper1_cpu}
run() { local group=$1; shift; python -m vecgossip -m "$@" progress=false hydra.sweep.dir="$ROOT/$group"; }
T1="+experiment=table1 nodes=50"
run row1       $T1 t_acq=10 R=1 degree=8                                  # 4 cells: both methods, IID and alpha 0.5
run row2_tl    $T1 t_acq=10 R=1 degree=32 method=tl_compression alpha=null
run row2_vc    $T1 t_acq=10 R=1 degree=32 method=vc alpha=null,0.5
run row3_tl    $T1 t_acq=10 R=4 degree=8 method=tl_compression alpha=null
run row3_vc    $T1 t_acq=10 R=4 degree=8 method=vc alpha=null,0.5
run row4_tl    $T1 "t_acq=[1,19]" R=1 degree=8 method=tl_compression alpha=null
run row4_vc    $T1 "t_acq=[1,19]" R=1 degree=8 method=vc alpha=null,0.5
run seeds      $T1 t_acq=10 R=1 degree=8 method=vc alpha=null seed=1,2
run fedavg     method=fedavg_tick early_stop=true
run baseline   +experiment=baseline max_ticks=3000 alpha=null,0.5
python -m vecgossip.report "$ROOT" --out results/paper1_cpu
python - "$ROOT" <<'PY'
import shutil, sys
from pathlib import Path
root, dest = Path(sys.argv[1]), Path("results/paper1_cpu/runs")
for summary in sorted(root.rglob("summary.json")):
    job = summary.parent
    out = dest / job.relative_to(root)
    (out / ".hydra").mkdir(parents=True, exist_ok=True)
    for f in ("summary.json", "metrics.csv", ".hydra/overrides.yaml"):
        shutil.copy(job / f, out / f)
print(f"copied {len(list(dest.rglob('summary.json')))} runs into {dest}")
PY
