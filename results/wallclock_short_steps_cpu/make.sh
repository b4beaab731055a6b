#!/usr/bin/env bash
# DivShare's regime (issue 48): the setting of results/wallclock_cpu (60 nodes, MNIST MLP, degree 6,
# DivShare's links: 53 uplinks at 60 Mbit/s, 7 at 10-13; 1 ms latency) with steps of 0.1 s instead
# of 1 s, so that a slow uplink's model (0.13-0.16 s at 10-13 Mbit/s) takes longer than a step:
# the communication-bound regime DivShare's headline (faster to target than AD-PSGD, up to 3.9x)
# is about, against uniform 60 Mbit/s links. DivShare (its preset: 10 fragments to 6 random
# nodes, FIFO uplinks, flush) and AD-PSGD, 300 ticks of 0.1 s (30 virtual seconds), checked every
# 2 s; seeds as given (default 0; jobs: DivShare's links first, then uniform, seeds inside).
#   VECGOSSIP_DATA=../shared/data bash results/wallclock_short_steps_cpu/make.sh SWEEP_ROOT [SEEDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=${1:-runs/wallclock_short_steps_cpu}
SEEDS=${2:-0}
DEST=${DEST:-results/wallclock_short_steps_cpu}
COMMON=(model=mlp nodes=60 degree=6 max_ticks=300 eval_every=20 clock.enabled=true
        'clock.links.uplink=[{nodes:53,mbps:60},{nodes:7,mbps:[10,13]}],60' clock.links.latency=0.001
        clock.compute.seconds=0.1 clock.resolution=0.1 seed=$SEEDS progress=false)
python -m vecgossip -m method=adpsgd "${COMMON[@]}" hydra.sweep.dir="$ROOT/adpsgd"
python -m vecgossip -m method=divshare "${COMMON[@]}" hydra.sweep.dir="$ROOT/divshare"
for part in adpsgd divshare; do
    python results/copy_runs.py "$ROOT/$part" "$DEST/runs/$part"
done
python -m vecgossip.report "$DEST/runs/adpsgd" "$DEST/runs/divshare" --out "$DEST/tick" > /dev/null
python results/wallclock_cpu/table.py "$DEST/runs" --out "$DEST" --at 30
