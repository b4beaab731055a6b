#!/usr/bin/env bash
# Issue 27: model.exec=auto against the fair per-client loop: runs of each paper model (the first
# measures and caches the decision, the later ones reuse it), the CNN at m = 100, and one client's
# step alone against the loop's two variants.
#   bash results/exec_cpu/make.sh     (from the repository root; ~15 min on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=results/exec_cpu
export VECGOSSIP_EXEC_CACHE=${VECGOSSIP_EXEC_CACHE:-$(mktemp -d)/exec.json}   # a fresh cache: run 1 measures
for model in resnet18 vgg11; do
  runs="1 2"; [ $model = vgg11 ] && runs="1 2 3"
  for run in $runs; do
    python benchmarks/rounds.py --m 8 --batch 32 --steps 1 --reps 5 --model $model --exec auto \
      > $OUT/rounds_${model}_m8_b32_auto_run$run.txt
  done
done
python benchmarks/rounds.py --m 100 --batch 128 --steps 1 --reps 3 --model cnn --exec auto \
  > $OUT/rounds_cnn_m100_b128_auto.txt
python benchmarks/client_step.py --model vgg11 > $OUT/client_step_vgg11.txt
python benchmarks/client_step.py --model resnet18 --reps 9 > $OUT/client_step_resnet18.txt
