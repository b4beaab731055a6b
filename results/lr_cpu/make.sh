#!/usr/bin/env bash
# results/lr_cpu (issue 39): which round-engine SGD steps lr / (1 - momentum) LeNet trains at on MNIST,
# 8 clients on a ring, 3 rounds (the presets' own local steps), one process per run; outputs in
# ROOT/<method>_<lr> (default /work/lr), their small files copied to runs/, then table.md.
#   VECGOSSIP_DATA=../shared/data bash results/lr_cpu/make.sh [ROOT]
set -eu
cd "$(dirname "$0")/../.."
ROOT=${1:-/work/lr}
export MPLBACKEND=Agg OMP_NUM_THREADS=1
for spec in "dfedsam 0.1" "dfedsam 0.03" "dfedsam 0.01" "dfedavgm 0.1" "dfedavgm 0.05" "dfedavgm 0.03" "dpsgd 0.1"; do
  set -- $spec
  [ -f "$ROOT/$1_$2/summary.json" ] && continue
  python -m vecgossip method=$1 optim.lr=$2 topology=ring clients=8 data=mnist model=lenet rounds=3 eval_every=1 \
      data.global_test_size=1000 progress=false hydra.run.dir="$ROOT/$1_$2" || [ $? = 3 ]   # 3: diverged (a result)
done
python results/copy_runs.py "$ROOT" results/lr_cpu/runs
python results/lr_cpu/table.py
