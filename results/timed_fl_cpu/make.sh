#!/usr/bin/env bash
# Issue 55's timed federated learning: FedAvg (a barrier at the server every round) against FedBuff
# (Nguyen et al. 2022: buffered asynchronous aggregation) in virtual seconds, same clients, same
# devices, same links. 100 clients (MNIST MLP, the default shards), 10 local steps of SGD a
# client's turn; device speeds lognormal (mean 0.1 s a step, sigma 1: a heavy straggler tail);
# client links 10 Mbit/s, the server's 100 Mbit/s, 50 ms latency; fair sharing.
#   FedAvg: 10 clients a round (participation 0.1), 150 rounds = 1,500 client updates;
#   FedBuff: 10 clients in flight, a server step every 5 uploads (staleness 1/sqrt(1 + tau)),
#     300 steps = 1,500 client updates.
# Seeds 0, 1, 2; resumable; then the table:
#   VECGOSSIP_DATA=../shared/data bash results/timed_fl_cpu/make.sh SWEEP_ROOT
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=${1:-runs/timed_fl_cpu}
COMMON=(model=mlp clients=100 local_steps=10 local_epochs=null eval_every=10 clock.enabled=true
        clock.compute.model=lognormal clock.compute.seconds=0.1 clock.compute.sigma=1.0 clock.links.uplink=10
        clock.links.server=100 clock.links.latency=0.05 seed=0,1,2 progress=false)
python -m vecgossip -m method=fedavg participation=0.1 rounds=150 "${COMMON[@]}" hydra.sweep.dir="$ROOT/fedavg"
python -m vecgossip -m method=fedbuff algorithm.concurrency=10 algorithm.buffer=5 rounds=300 "${COMMON[@]}" \
    hydra.sweep.dir="$ROOT/fedbuff"
python results/timed_fl_cpu/table.py "$ROOT" --out results/timed_fl_cpu
