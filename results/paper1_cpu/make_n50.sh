#!/usr/bin/env bash
# Table I at N = 50 on a CPU (issue 40): all 32 cells (T_acq 10 and [1,19], R 1 and 4, k 8 and 32,
# TL + compression and VC, IID and alpha 0.5), seeds 0, 1 and 2, through the table1 preset. One cell
# and seed per sweep, seed-major (every cell gets seed 0 before any gets seed 1), so that a finished
# run is copied into results/ as it ends. Resumable: re-running skips the runs whose summary.json
# exists (resume=auto); a run stopped mid-way continues from its checkpoint (checkpoint_seconds=300).
#   VECGOSSIP_DATA=../shared/data bash results/paper1_cpu/make_n50.sh [SWEEP_ROOT]
# (run it from a git worktree of a fixed commit when the checkout is being edited meanwhile, with
#  DEST=<the checkout>/results/paper1_cpu/runs; OMP_NUM_THREADS=1 leaves the other core free)
# Then: python -m vecgossip.report results/paper1_cpu/runs --out results/paper1_cpu
#       python results/paper1_cpu/table.py
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=${1:-runs/paper1_cpu}
DEST=${DEST:-results/paper1_cpu/runs}   # where finished runs are copied
SEEDS=${SEEDS:-0 1 2}
METHODS=${METHODS:-vc tl_compression}   # e.g. METHODS=vc SEEDS="1 2": the cheap columns' spreads first
copy() { python results/copy_runs.py "$ROOT" "$DEST"; }
for seed in $SEEDS; do
  for method in $METHODS; do
    for k in 8 32; do
      for t in 10 "[1,19]"; do
        for R in 1 4; do
          for a in null 0.5; do
            cell="${method}_t${t//[^0-9]/_}_R${R}_k${k}_a${a}"
            if [ -f "$DEST/$cell/$seed/summary.json" ]; then continue; fi
            python -m vecgossip +experiment=table1 -m nodes=50 method=$method seed=$seed "t_acq=$t" R=$R \
              degree=$k alpha=$a progress=false checkpoint_seconds=300 \
              hydra.sweep.dir="$ROOT/$cell" hydra.sweep.subdir="$seed"
            copy
          done
        done
      done
    done
  done
done
