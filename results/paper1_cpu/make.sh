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
python results/copy_runs.py "$ROOT" results/paper1_cpu/runs
python results/paper1_cpu/table.py > /dev/null   # N = 50 beside N = 1000 (results/paper1_n1000_cpu/runs.csv) in table1.md
