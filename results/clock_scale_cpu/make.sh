#!/usr/bin/env bash
# Issue 56's scale runs of the clock (2-core CPU; numbers in README.md and benchmarks/RESULTS.md):
#  1. one barrier round's host cost, fair sharing, 1000 to 100,000 nodes, uniform and DivShare's links;
#  2. the tick engine in seconds at 1000 nodes for a stretch of virtual time: gossip learning on a
#     random 6-regular graph, MNIST MLP, lognormal steps (sigma 0.3), DivShare's links scaled to
#     1000 nodes (883 at 60 Mbit/s, 117 at 10-13), the latency matrix latency_100.csv (100 sites on
#     a sphere, tiled): (a) steps of mean 1 s, 0.25 s windows, 120 virtual seconds (the offered load
#     exceeds the slow links: queues grow); (b) steps of mean 2 s, 0.5 s windows, `SECONDS_RUN`
#     virtual seconds (default 3,600; ~1 host hour on one thread here).
#   VECGOSSIP_DATA=../shared/data bash results/clock_scale_cpu/make.sh [SWEEP_ROOT]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=${1:-runs/clock_scale_cpu}
SECONDS_RUN=${SECONDS_RUN:-3600}
python benchmarks/clock_rounds.py --nodes 1000 3000 10000 30000 100000 --policies fair --repeat 1 \
    --out results/clock_scale_cpu/rounds_scale.json
python -m vecgossip method=gossip model=mlp data=mnist nodes=1000 degree=6 max_ticks=480 \
    eval_every=240 data.local_eval_size=100 progress=false clock.enabled=true \
    clock.compute.model=lognormal clock.compute.seconds=1.0 clock.compute.sigma=0.3 clock.resolution=0.25 \
    'clock.links.uplink=[{nodes:883,mbps:60},{nodes:117,mbps:[10,13]}]' \
    clock.links.latency=results/clock_scale_cpu/latency_100.csv checkpoint_every=400 \
    hydra.run.dir="$ROOT/tick_1000"
python -m vecgossip method=gossip model=mlp data=mnist nodes=1000 degree=6 max_ticks=$((SECONDS_RUN * 2)) \
    eval_every=600 data.local_eval_size=100 progress=false clock.enabled=true \
    clock.compute.model=lognormal clock.compute.seconds=2.0 clock.compute.sigma=0.3 clock.resolution=0.5 \
    'clock.links.uplink=[{nodes:883,mbps:60},{nodes:117,mbps:[10,13]}]' \
    clock.links.latency=results/clock_scale_cpu/latency_100.csv checkpoint_every=400 \
    hydra.run.dir="$ROOT/tick_3600"
