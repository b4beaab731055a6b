#!/usr/bin/env bash
# Issue 37's Byzantine comparison at the CPU scale (conf/experiment/byzantine_cpu.yaml): MNIST, the
# MLP, 16 clients (IID), 2 Byzantine, 100 rounds of one local step; D-PSGD, ClippedGossip, trimmed
# mean, median and BALANCE on the ring and the exponential graph, under six attacks and none.
# Resumable: re-running skips finished jobs. Then the report (byzantine.md, byzantine.png) and a copy
# of each job's small files.
#   VECGOSSIP_DATA=../shared/data bash results/byzantine_cpu/make.sh SWEEP_ROOT [SEEDS]
#   (run it from a git worktree of a fixed commit when the checkout is being edited meanwhile,
#    with DEST=<the checkout>/results/byzantine_cpu)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=${1:-runs/byzantine_cpu}
SEEDS=${2:-0,1,2}
DEST=${DEST:-results/byzantine_cpu}
run() { local group=$1; shift; python -m vecgossip +experiment=byzantine_cpu -m "$@" seed=$SEEDS \
          hydra.sweep.dir="$ROOT/$group" || [ $? -eq 3 ]; }   # 3: some job diverged (a result, kept)
copy() { python results/copy_runs.py "$ROOT" "$DEST/runs"; }
run none adversary.nodes=0 adversary.attack=sign_flip; copy   # no Byzantine node: one attack value
run attacks; copy
# ClippedGossip with a fixed radius (the adaptive one trusts the second-largest distance: it assumes
# at most one Byzantine neighbour). Honest neighbours sit ~0.03 apart here (30 rounds, exponential).
run clipped_fixed method=clipped_gossip algorithm.tau=0.1,1.0; copy
run clipped_fixed_none method=clipped_gossip algorithm.tau=0.1,1.0 adversary.nodes=0 adversary.attack=sign_flip; copy
python -m vecgossip.report "$DEST/runs" --out "$DEST" > /dev/null
