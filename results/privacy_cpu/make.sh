#!/usr/bin/env bash
# Issue 38's evidence at the CPU scale (conf/experiment/privacy_cpu.yaml): accuracy against epsilon
# (1, 3, 8 and the non-private run) for D-PSGD (500 rounds of one DP-SGD step) and DFedAvg (100
# rounds of five: the same 500 private steps, so the same epsilon) on the ring and the exponential
# graph, 16 clients, MNIST, the MLP, seeds 0-2; then Muffliato (one private step, four gossip
# steps a round, the epsilon = 3 noise) on both graphs, whose summary.json reports the pairwise
# network DP beside the local DP of the same run; and both methods with clipping alone (sigma 0).
# Resumable: re-running skips finished jobs.
#   VECGOSSIP_DATA=../shared/data bash results/privacy_cpu/make.sh SWEEP_ROOT [SEEDS]
#   (run it from a git worktree of a fixed commit when the checkout is being edited meanwhile,
#    with DEST=<the checkout>/results/privacy_cpu)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=${1:-runs/privacy_cpu}
SEEDS=${2:-0,1,2}
DEST=${DEST:-results/privacy_cpu}
run() { local group=$1; shift; python -m vecgossip +experiment=privacy_cpu -m "$@" seed=$SEEDS \
          hydra.sweep.dir="$ROOT/$group"; }
copy() { python results/copy_runs.py "$ROOT" "$DEST/runs"; }
run dpsgd method=dpsgd; copy
run dfedavg method=dfedavg rounds=100 local_steps=5 local_epochs=null eval_every=10; copy
run muffliato method=muffliato gossip_steps=4 privacy.noise_multiplier=1.406; copy
# Muffliato's network amplification where it shows: 10 rounds of 8 gossip steps
run muffliato_short method=muffliato gossip_steps=8 rounds=10 eval_every=5 privacy.noise_multiplier=1.406; copy
# clipping without noise (sigma 0, epsilon inf): how much of the gap to the non-private run is clipping's
run dpsgd_clip method=dpsgd privacy.noise_multiplier=0; copy
run dfedavg_clip method=dfedavg rounds=100 local_steps=5 local_epochs=null eval_every=10 privacy.noise_multiplier=0; copy
python -m vecgossip.report "$DEST/runs" --out "$DEST" > /dev/null
