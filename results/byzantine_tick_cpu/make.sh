#!/usr/bin/env bash
# Issue 49's tick-engine Byzantine table (conf/experiment/byzantine_tick_cpu.yaml): MNIST, the MLP,
# 16 nodes on a random 4-regular graph (IID), 2 Byzantine, 2000 ticks; gossip learning (Eq. 1),
# variance correction and the robust merge (method=robust_gossip: clip, median, trimmed) under
# seven attacks and none. Resumable: re-running skips finished jobs. Then the report
# (byzantine.md, byzantine.png) and a copy of each job's small files.
#   VECGOSSIP_DATA=../shared/data bash results/byzantine_tick_cpu/make.sh SWEEP_ROOT [SEEDS]
#   (run it from a git worktree of a fixed commit when the checkout is being edited meanwhile,
#    with DEST=<the checkout>/results/byzantine_tick_cpu)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=${1:-runs/byzantine_tick_cpu}
SEEDS=${2:-0,1,2}
DEST=${DEST:-results/byzantine_tick_cpu}
run() { local group=$1; shift; python -m vecgossip +experiment=byzantine_tick_cpu -m "$@" seed=$SEEDS \
          hydra.sweep.dir="$ROOT/$group" || [ $? -eq 3 ]; }   # 3: some job diverged (a result, kept)
copy() { python results/copy_runs.py "$ROOT" "$DEST/runs"; }
run none adversary.nodes=0 adversary.attack=sign_flip; copy   # no Byzantine node: one attack value
run attacks; copy
run robust_none method=robust_gossip algorithm.rule=clip,median,trimmed adversary.nodes=0 adversary.attack=sign_flip; copy
run robust method=robust_gossip algorithm.rule=clip,median,trimmed; copy
python -m vecgossip.report "$DEST/runs" --out "$DEST" > /dev/null
