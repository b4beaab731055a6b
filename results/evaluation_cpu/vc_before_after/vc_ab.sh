#!/usr/bin/env bash
# VC run (N = 50, +experiment=vc) before (commit 50f1fa5) and after (HEAD), alternated in the same minutes.
set -euo pipefail
export VECGOSSIP_DATA=/work/shared/data
OUT=${1:-/tmp/vcruns}
for i in 1 2 3; do
  for side in before after; do
    dir=/work/main; [ $side = before ] && dir=/tmp/before
    (cd $dir && python -m vecgossip +experiment=vc progress=false hydra.run.dir=$OUT/$side$i 2>&1 | grep '^\[vecgossip\]')
  done
done
