#!/usr/bin/env bash
# Issue 48's first timed runs (docs: Time, stragglers and churn): D-PSGD, 60 clients on a random
# 6-regular graph, the MNIST MLP, 30 rounds, in virtual seconds: every step 50 ms (constant) or
# 6 of 60 nodes 10x slower (stragglers), every uplink 60 Mbit/s or DivShare's groups (53 at 60,
# 7 at 10-13 Mbit/s), 1 ms latency, fair sharing; seeds 0, 1, 2; then the same with a per-node
# barrier (clock.barrier=node). Resumable.
#   VECGOSSIP_DATA=../shared/data bash results/time_rounds_cpu/make.sh SWEEP_ROOT
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=${1:-runs/time_rounds_cpu}
DEST=${DEST:-results/time_rounds_cpu}
python -m vecgossip -m method=dpsgd model=mlp clients=60 topology=regular degree=6 rounds=30 eval_every=5 \
    clock.enabled=true 'clock.links.uplink=60,[{nodes:53,mbps:60},{nodes:7,mbps:[10,13]}]' \
    clock.links.latency=0.001 clock.compute.seconds=0.05 clock.compute.model=constant,stragglers \
    seed=0,1,2 progress=false hydra.sweep.dir="$ROOT"
python -m vecgossip -m method=dpsgd model=mlp clients=60 topology=regular degree=6 rounds=30 eval_every=5 \
    clock.enabled=true 'clock.links.uplink=60,[{nodes:53,mbps:60},{nodes:7,mbps:[10,13]}]' \
    clock.links.latency=0.001 clock.compute.seconds=0.05 clock.compute.model=constant,stragglers \
    clock.barrier=node seed=0,1,2 progress=false hydra.sweep.dir="${ROOT}_node"    # per-node barriers
python results/copy_runs.py "$ROOT" "$DEST/runs"
python results/copy_runs.py "${ROOT}_node" "$DEST/runs_node"
python -m vecgossip.report "$DEST/runs" "$DEST/runs_node" --out "$DEST" > /dev/null
