#!/usr/bin/env bash
# Issue 48's wall-clock comparison in DivShare's setting (60 nodes: 53 uplinks at 60 Mbit/s, 7 at
# 10-13 Mbit/s, 1 ms latency, degree 6, fair sharing), MNIST MLP, every local step 1 s, 3 seeds,
# against a uniform 60 Mbit/s baseline:
#   round engine (a barrier per round): D-PSGD on a random 6-regular graph (momentum 0, the
#     preset, and 0.9, EL's), Epidemic Learning (EL-Local, s = 6 random peers a round, momentum
#     0.9), 150 rounds, one local step a round; D-PSGD (momentum 0.9) with a per-node barrier
#     (clock.barrier=node: each node waits for its 6 in-neighbours only, rounds overlap);
#   tick engine in seconds (no barrier: each node sends each fresh model to its 6 neighbours and
#     merges when its buffer is full): gossip learning (Eq. 1, beta 0.5) and VC (Algorithm 3),
#     gossip learning with timers and age-weighted merges (one model a step to a random neighbour),
#     AD-PSGD (each step an exchange with a random neighbour: two messages; the average and
#     the gradient apply when both have arrived), and SWIFT (wait-free averages with the latest
#     model from each of the 6 neighbours, Metropolis-Hastings weights), 300 one-second ticks; DivShare (10 fragments,
#     each to 6 random nodes, FIFO uplinks with queue flush: its preset), 200 one-second ticks
#     (its host cost: ~10 s a virtual second here).
# Resumable; then the report of each engine's runs.
#   VECGOSSIP_DATA=../shared/data bash results/wallclock_cpu/make.sh SWEEP_ROOT
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=${1:-runs/wallclock_cpu}
DEST=${DEST:-results/wallclock_cpu}
LINKS='clock.links.uplink=60,[{nodes:53,mbps:60},{nodes:7,mbps:[10,13]}]'
COMMON=(model=mlp clock.enabled=true "$LINKS" clock.links.latency=0.001 clock.compute.seconds=1.0 seed=0,1,2
        progress=false)
python -m vecgossip -m method=dpsgd topology=regular degree=6 clients=60 rounds=150 eval_every=10 "${COMMON[@]}" \
    hydra.sweep.dir="$ROOT/dpsgd"
python -m vecgossip -m method=dpsgd optim.momentum=0.9 topology=regular degree=6 clients=60 rounds=150 eval_every=10 \
    "${COMMON[@]}" hydra.sweep.dir="$ROOT/dpsgd_momentum"
python -m vecgossip -m method=dpsgd optim.momentum=0.9 clock.barrier=node topology=regular degree=6 clients=60 rounds=150 \
    eval_every=10 "${COMMON[@]}" hydra.sweep.dir="$ROOT/dpsgd_momentum_node"
python -m vecgossip -m method=el_local algorithm.s=6 local_steps=1 local_epochs=null clients=60 rounds=150 eval_every=10 \
    "${COMMON[@]}" hydra.sweep.dir="$ROOT/el_local"
python -m vecgossip -m method=gossip,vc nodes=60 degree=6 max_ticks=300 eval_every=10 clock.resolution=1.0 \
    "${COMMON[@]}" hydra.sweep.dir="$ROOT/tick"
python -m vecgossip -m method=adpsgd nodes=60 degree=6 max_ticks=300 eval_every=10 clock.resolution=1.0 \
    "${COMMON[@]}" hydra.sweep.dir="$ROOT/adpsgd"
python -m vecgossip -m method=gossip_timers nodes=60 degree=6 max_ticks=300 eval_every=10 clock.resolution=1.0 \
    "${COMMON[@]}" hydra.sweep.dir="$ROOT/gossip_timers"
python -m vecgossip -m method=swift nodes=60 degree=6 max_ticks=300 eval_every=10 clock.resolution=1.0 \
    "${COMMON[@]}" hydra.sweep.dir="$ROOT/swift"
python -m vecgossip -m method=divshare nodes=60 degree=6 max_ticks=200 eval_every=10 clock.resolution=1.0 \
    "${COMMON[@]}" hydra.sweep.dir="$ROOT/divshare"
# issue 55: two asynchronous algorithms written on the public interface, 200 one-second ticks
python -m vecgossip -m method=staleness_gossip,el_async nodes=60 degree=6 max_ticks=200 eval_every=10 \
    clock.resolution=1.0 "${COMMON[@]}" hydra.sweep.dir="$ROOT/async_new"
for part in dpsgd dpsgd_momentum dpsgd_momentum_node el_local tick adpsgd gossip_timers swift divshare async_new; do
    python results/copy_runs.py "$ROOT/$part" "$DEST/runs/$part"
done
python -m vecgossip.report "$DEST/runs/dpsgd" "$DEST/runs/dpsgd_momentum" "$DEST/runs/dpsgd_momentum_node" "$DEST/runs/el_local" --out "$DEST/rounds" > /dev/null
python -m vecgossip.report "$DEST/runs/tick" "$DEST/runs/adpsgd" "$DEST/runs/gossip_timers" "$DEST/runs/swift" "$DEST/runs/divshare" \
    "$DEST/runs/async_new" --out "$DEST/tick" > /dev/null
python results/wallclock_cpu/table.py "$DEST/runs" --out "$DEST"
