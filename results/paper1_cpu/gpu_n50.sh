#!/usr/bin/env bash
# The rest of Table I's N = 50 TL + compression runs on a lent GPU (issue 40): every (cell, seed) of
# make_n50.sh that has no committed run in results/paper1_cpu/runs/, all at once (one process each,
# one CPU thread each; the tick engine at N = 50 is launch-bound, so processes share the GPU well),
# with make_n50.sh's preset and options plus device=cuda. Finished runs' small files go to
# $OUT/runs/<cell>/<seed> (results/copy_runs.py), each run's log and wall time to $OUT/logs/.
#   OUT=/tmp/out VECGOSSIP_DATA=... bash results/paper1_cpu/gpu_n50.sh LIMIT_S [SKIP ...]
# SKIP: <cell>/<seed> running elsewhere (the CPU sweep's current job). LIMIT_S: each run's timeout.
set -uo pipefail
cd "$(dirname "$0")/../.."
LIMIT=${1:-480}; shift || true
SKIP=" $* "
WORK=$(mktemp -d)
mkdir -p "$OUT/logs"
export OMP_NUM_THREADS=1 MPLBACKEND=Agg
PY=${PY:-python}
n=0
for seed in 1 2; do
  for k in 8 32; do
    for t in 10 "[1,19]"; do
      for R in 1 4; do
        for a in null 0.5; do
          cell="tl_compression_t${t//[^0-9]/_}_R${R}_k${k}_a${a}"
          [ -f "results/paper1_cpu/runs/$cell/$seed/summary.json" ] && continue
          [[ "$SKIP" == *" $cell/$seed "* ]] && continue
          ( start=$(date +%s)
            timeout "$LIMIT" "$PY" -m vecgossip +experiment=table1 nodes=50 method=tl_compression seed=$seed "t_acq=$t" \
                R=$R degree=$k alpha=$a progress=false device=cuda checkpoint_seconds=null \
                hydra.run.dir="$WORK/$cell/$seed" > "$OUT/logs/${cell}_$seed.log" 2>&1
            echo "$cell/$seed rc=$? wall=$(( $(date +%s) - start ))s" >> "$OUT/logs/done.txt" ) &
          n=$((n + 1))
        done
      done
    done
  done
done
echo "$n runs started"
wait
"$PY" results/copy_runs.py "$WORK" "$OUT/runs"
sort "$OUT/logs/done.txt"
