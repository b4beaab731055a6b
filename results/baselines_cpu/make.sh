#!/usr/bin/env bash
# Issue 24's comparison at the CPU scale (conf/experiment/baselines_cpu.yaml): CIFAR-10 (JPEG copy),
# the CNN, 16 clients, Dirichlet 0.3, 200 rounds; ring and exponential graphs (+ the one-peer
# exponential graph for SGP, the complete overlay for Epidemic Learning); seeds as given (default 0).
# CHOCO-SGD's gamma per compressor from gamma_tuning/ (60-round runs on the ring, seed 0).
# Resumable: re-running skips finished jobs. Then the report and a copy of each job's small files.
#   VECGOSSIP_DATA=../shared/data [RING_SEEDS=1,2] bash results/baselines_cpu/make.sh SWEEP_ROOT [SEEDS]
#   (run it from a git worktree of a fixed commit when the checkout is being edited meanwhile,
#    with DEST=<the checkout>/results/baselines_cpu)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=${1:-runs/baselines_cpu}
SEEDS=${2:-0}
DEST=${DEST:-results/baselines_cpu}
run() { local group=$1; shift; python -m vecgossip +experiment=baselines_cpu -m "$@" seed=$SEEDS \
          hydra.sweep.dir="$ROOT/$group"; }
copy() { python results/copy_runs.py "$ROOT" "$DEST/runs"; }
run choco_top1 method=choco algorithm.fraction=0.01 algorithm.gamma=0.05 topology=ring,exponential; copy
run choco_top10 method=choco algorithm.fraction=0.1 algorithm.gamma=0.5 topology=ring,exponential; copy
run k1 method=dpsgd,dsgdm,gradient_tracking,qgdsgdm,sgp topology=ring,exponential; copy
run sgp_one_peer method=sgp topology=one_peer_exponential; copy
run k5 method=dfedavgm,dfedsam topology=ring,exponential; copy
run el method=el_local topology=complete; copy
if [ "${RING_SEEDS:-}" ]; then   # RING_SEEDS=1,2: more seeds on the ring for the K=1 claims (QG vs DSGDm, tracking, CHOCO)
  SEEDS=$RING_SEEDS run k1_ring_seeds method=dpsgd,dsgdm,gradient_tracking,qgdsgdm topology=ring; copy
  SEEDS=$RING_SEEDS run choco_top1_ring_seeds method=choco algorithm.fraction=0.01 algorithm.gamma=0.05 topology=ring; copy
fi
python -m vecgossip.report "$DEST/runs" --out "$DEST" > /dev/null
