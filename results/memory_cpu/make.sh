#!/usr/bin/env bash
# results/memory_cpu: estimate vs peak for every method preset at small size, one process per run
# (outputs in ROOT/<method>, default /work/mem; memory.csv from their summary.json; finished presets skipped)
set -eu
cd "$(dirname "$0")/../.."
export VECGOSSIP_DATA=${VECGOSSIP_DATA:-../shared/data} MPLBACKEND=Agg OMP_NUM_THREADS=1
python results/memory_cpu/measure.py "${1:-/work/mem}" "${@:2}"   # METHOD ...: only these rows
