#!/usr/bin/env bash
# The scaling study on a CPU (issue 25): the tick engine's VC and plain gossip at N = 50 ... 2000
# (+experiment=scaling: early stop for VC, 1000 ticks at most) and the round engine's DFedAvgM with
# the CNN at m = 16 ... 256 (+experiment=scaling_rounds: 10 rounds), then the report
# (scaling.md / scaling.csv / scaling.png) and each job's small files. Resumable.
#   VECGOSSIP_DATA=../shared/data bash results/scaling_cpu/make.sh SWEEP_ROOT
#   (from a git worktree of a fixed commit when the checkout is being edited meanwhile, with
#    DEST=<the checkout>/results/scaling_cpu)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=${1:-runs/scaling_cpu}
DEST=${DEST:-results/scaling_cpu}
python -m vecgossip +experiment=scaling_rounds -m hydra.sweep.dir="$ROOT/rounds"
python results/copy_runs.py "$ROOT" "$DEST/runs"
python -m vecgossip +experiment=scaling -m hydra.sweep.dir="$ROOT/tick"
python results/copy_runs.py "$ROOT" "$DEST/runs"
python -m vecgossip.report "$DEST/runs" --out "$DEST" > /dev/null
