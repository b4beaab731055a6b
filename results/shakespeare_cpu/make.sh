#!/usr/bin/env bash
# Issue 57: LEAF's Shakespeare at a CPU scale. 20 speaking roles (data.sample_seed=0), the FedAvg
# paper's character LSTM narrowed to 64 units (model.width=64), batches of 10 windows, plain SGD at
# lr 2 (no weight decay, no momentum); every method on the same roles and the same 80/20 split.
#   1. The FedAvg paper's finding (McMahan et al. 2017, Table 2): rounds to a target accuracy of the
#      server model, FedAvg (50 local steps a round; a fixed number of steps, not epochs: the roles
#      are very unbalanced) against FedSGD (one step a round on 50 windows a client), all 20
#      clients every round, on the role split (non-IID) and on the same windows dealt at random (IID).
#   2. Decentralized methods on the role split, seeds 0, 1, 2 (replicas=3): D-PSGD (one step and one
#      gossip step a round) on a ring and on the exponential graph, 500 rounds; gossip learning
#      without and with variance correction (method=gossip / vc, the tick engine, 500 ticks: 500 local steps a node for each).
# Resumable; then the table and the plot. The committed runs ran the two parts side by side, one
# thread each (two processes of two threads on two cores spin against each other, 10x slower):
#   VECGOSSIP_DATA=../shared/data OMP_NUM_THREADS=1 bash results/shakespeare_cpu/make.sh SWEEP_ROOT server &
#   VECGOSSIP_DATA=../shared/data OMP_NUM_THREADS=1 bash results/shakespeare_cpu/make.sh SWEEP_ROOT decentralized
#   bash results/shakespeare_cpu/make.sh SWEEP_ROOT table
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=${1:-runs/shakespeare_cpu}
PART=${2:-all}
TEXT=(data=shakespeare model=char_lstm model.width=64 data.batch_size=10 optim.weight_decay=0 progress=false)
SERVER=(method=fedavg clients=20 participation=1.0 local_epochs=null optim.lr=2.0 data.global_test_size=200)
if [[ $PART == all || $PART == server ]]; then
  for split in roles iid; do
    python -m vecgossip "${TEXT[@]}" "${SERVER[@]}" data.split=$split local_steps=50 rounds=30 eval_every=2 \
        replicas=3 hydra.run.dir="$ROOT/fedavg_$split"
    python -m vecgossip "${TEXT[@]}" "${SERVER[@]}" data.split=$split local_steps=1 data.batch_size=50 rounds=1000 \
        eval_every=25 hydra.run.dir="$ROOT/fedsgd_$split"
  done
fi
if [[ $PART == all || $PART == decentralized ]]; then
  for topo in ring exponential; do
    python -m vecgossip "${TEXT[@]}" method=dpsgd topology=$topo clients=20 optim.lr=2.0 rounds=500 eval_every=50 \
        data.global_test_size=200 replicas=3 hydra.run.dir="$ROOT/dpsgd_$topo"
  done
  for method in gossip vc; do
    python -m vecgossip "${TEXT[@]}" method=$method nodes=20 degree=4 optim.lr=2.0 optim.momentum=0 \
        optim.lr_policy=fixed optim.bias_lr_mult=1 max_ticks=500 eval_every=50 replicas=3 \
        hydra.run.dir="$ROOT/$method"
  done
fi
if [[ $PART == all || $PART == table ]]; then
  python results/shakespeare_cpu/table.py "$ROOT" --out results/shakespeare_cpu
fi
