#!/usr/bin/env bash
# Table I's variance-correction half at N = 1000 on a CPU (issue 25): the 16 cells (T_acq 10 and
# [1,19], R 1 and 4, k 8 and 32, IID and alpha 0.5), seed 0, through the table1 preset, one cell
# per sweep so that each finished cell is copied here as it ends. Resumable: re-running skips the
# cells whose summary.json exists (resume=auto; a cell stopped mid-way continues from its checkpoint).
#   VECGOSSIP_DATA=../shared/data bash results/paper1_n1000_cpu/make.sh [SWEEP_ROOT]
# (run it from a git worktree of a fixed commit when the checkout is being edited meanwhile, with
#  DEST=<the checkout>/results/paper1_n1000_cpu/runs)
#   python -m vecgossip.report SWEEP_ROOT --out results/paper1_n1000_cpu
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=${1:-runs/paper1_n1000_cpu}
DEST=${DEST:-results/paper1_n1000_cpu/runs}   # where finished cells are copied
copy() { python results/copy_runs.py "$ROOT" "$DEST"; }
TL=${TL:-0}    # TL=1: after the VC cells, Table I's TL + compression cell (10, 1, 1000, 8) IID (issue 25)
for t in 10 "[1,19]"; do
  for R in 1 4; do
    for k in 8 32; do
      for a in null 0.5; do
        cell="t${t//[^0-9]/_}_R${R}_k${k}_a${a}"
        python -m vecgossip +experiment=table1 -m nodes=1000 method=vc seed=0 "t_acq=$t" R=$R degree=$k \
          alpha=$a progress=false checkpoint_seconds=300 hydra.sweep.dir="$ROOT/$cell"
        copy
      done
    done
  done
done
if [ "$TL" = 1 ]; then
  python -m vecgossip +experiment=table1 -m nodes=1000 method=tl_compression seed=0 t_acq=10 R=1 degree=8 \
    alpha=null progress=false checkpoint_seconds=300 hydra.sweep.dir="$ROOT/tl_t10_R1_k8_anull"
  copy
fi
