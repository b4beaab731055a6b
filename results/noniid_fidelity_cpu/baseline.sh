#!/usr/bin/env bash
# Issue 28: plain gossip learning (beta 0.5, no correction; +experiment=baseline) under the reading
# closest to the paper's non-IID column (3: each node tested on its own label mix), row 1, seed 0,
# 3000 ticks: does the plateau of Fig. 2 remain?
#   VECGOSSIP_DATA=../shared/data bash results/noniid_fidelity_cpu/baseline.sh [RUN_ROOT]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=${1:-runs/noniid_fidelity_cpu_baseline}
python -m vecgossip +experiment=baseline max_ticks=3000 alpha=0.5 data.eval_set=local progress=false \
  name=baseline_local_eval hydra.run.dir="$ROOT/r3_local_eval/row1/seed0"
mkdir -p results/noniid_fidelity_cpu/baseline
cp "$ROOT/r3_local_eval/row1/seed0/summary.json" "$ROOT/r3_local_eval/row1/seed0/metrics.csv" \
  results/noniid_fidelity_cpu/baseline/
