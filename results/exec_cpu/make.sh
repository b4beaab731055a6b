#!/usr/bin/env bash
# Issue 27: model.exec=auto against the fair per-client loop, two runs of each paper model (the
# first measures and caches the decision, the second reuses it) and the CNN at m = 100.
#   bash results/exec_cpu/make.sh     (from the repository root; ~15 min on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=results/exec_cpu
export VECGOSSIP_EXEC_CACHE=${VECGOSSIP_EXEC_CACHE:-$(mktemp -d)/exec.json}   # a fresh cache: run 1 measures
for model in resnet18 vgg11; do
  for run in 1 2; do
    python benchmarks/rounds.py --m 8 --batch 32 --steps 1 --reps 5 --model $model --exec auto \
      > $OUT/rounds_${model}_m8_b32_auto_run$run.txt
  done
done
python benchmarks/rounds.py --m 100 --batch 128 --steps 1 --reps 3 --model cnn --exec auto \
  > $OUT/rounds_cnn_m100_b128_auto.txt
