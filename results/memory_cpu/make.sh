#!/usr/bin/env bash
# results/memory_cpu: estimate vs peak for every method preset at small size, one process per run
# (outputs in ROOT/<method>, default /work/mem; then the table of results/memory_cpu/README.md from their summary.json)
set -u
cd "$(dirname "$0")/../.."
ROOT=${1:-/work/mem}
export VECGOSSIP_DATA=${VECGOSSIP_DATA:-../shared/data} MPLBACKEND=Agg OMP_NUM_THREADS=1
for m in adpsgd balance choco clipped_gossip compression dfedavg dfedavgm dfedsam dfedsam_mgs dpsgd dsgdm el_local el_oracle fedavg fedavg_tick fedper fedsam gossip gradient_tracking median muffliato qgdsgdm sgp tl tl_compression trimmed_mean vc; do
  case $m in
    adpsgd|compression|fedavg_tick|gossip|tl|tl_compression|vc) extra="nodes=20 max_ticks=30 eval_every=10";;
    *) extra="clients=16 rounds=2 eval_every=1";;
  esac
  [ $m = fedavg_tick ] && extra="nodes=20 max_ticks=30 eval_every=10 topology=star"
  [ -f $ROOT/$m/summary.json ] && continue
  timeout 900 python -m vecgossip method=$m $extra local_steps=2 local_epochs=null progress=false hydra.run.dir=$ROOT/$m > $ROOT/$m.log 2>&1
  rc=$?
  if [ $rc = 2 ]; then
    timeout 900 python -m vecgossip method=$m $extra progress=false hydra.run.dir=$ROOT/$m > $ROOT/$m.log 2>&1; rc=$?
  fi
  echo "$m rc=$rc"
done
