#!/usr/bin/env bash
# Issue 28: which reading of "non-IID, Dirichlet alpha = 0.5" reproduces Table I's VC alpha=0.5
# column? Rows 1, 2, 5, 9 (N = 50), seeds 0-2, variance correction (beta 0, early stop), each
# reading a config option (README "Data"); capped at 3000 ticks (2.2-2.5x the paper's values).
# Reading 4 (all 10,000 test images, every 50 ticks) runs for row 1, seed 0 only (its cost).
#   VECGOSSIP_DATA=../shared/data bash results/noniid_fidelity_cpu/make.sh [RUN_ROOT]
# Finished runs are skipped when it is started again (resume=auto), and so is any cell already in
# the committed runs.csv (a fresh machine runs only what is missing); table.py merges the new runs
# into runs.csv and writes table.md/csv.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=${1:-runs/noniid_fidelity_cpu}
declare -A READING=(
  [r1_label_mix]="data.sampler=label_mix data.eval_set=fixed100"      # today's (REFERENCE.md)
  [r2_shards]="data.sampler=shards data.eval_set=fixed100"            # disjoint Dirichlet shards
  [r3_local_eval]="data.sampler=label_mix data.eval_set=local"        # tested on its own label mix
  [r5_prior_mix]="data.sampler=prior_mix data.eval_set=fixed100"      # Dir(alpha/C 1_C): Hsu et al. 2019
  [r4_full_eval]="data.sampler=label_mix data.eval_set=full eval_every=50"   # 10,000 test images
)
declare -A ROW=([row1]="t_acq=10 R=1 degree=8" [row2]="t_acq=10 R=1 degree=32" [row5]="t_acq=10 R=4 degree=8"
                [row9]="t_acq=[1,19] R=1 degree=8")
one() {   # reading row seed
  if grep -q "^$1,$2,$3," results/noniid_fidelity_cpu/runs.csv 2>/dev/null; then return; fi
  python -m vecgossip method=vc nodes=50 alpha=0.5 early_stop=true max_ticks=3000 progress=false \
    ${ROW[$2]} ${READING[$1]} seed=$3 name=$1 hydra.run.dir="$ROOT/$1/$2/seed$3" || echo "failed: $1 $2 seed$3"
}
for seed in ${SEEDS:-0 1 2}; do
  for row in row1 row2 row5 row9; do
    for r in r1_label_mix r2_shards r3_local_eval r5_prior_mix; do one $r $row $seed; done
  done
done
one r4_full_eval row1 0   # ~2 minutes per evaluation of 50 LeNets on 10,000 images here: one cell, last
python results/noniid_fidelity_cpu/table.py "$ROOT"
