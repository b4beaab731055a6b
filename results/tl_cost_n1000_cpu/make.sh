#!/usr/bin/env bash
# What Table I's TL + compression half would cost at N = 1000 on this CPU (issue 25): the per-tick
# wall time of method=compression (TL + compression once its peers are in: TL alone gossips nothing
# in its first ticks) beside method=vc, same machine, same minutes, k = 8 and 32, IID, 40 ticks each
# without early stop; cost.py scales the whole VC runs' per-tick cost by that ratio and multiplies by
# the tick counts the paper reports for the 16 TL cells (cost.md).
#   VECGOSSIP_DATA=../shared/data bash results/tl_cost_n1000_cpu/make.sh [SWEEP_ROOT]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=${1:-runs/tl_cost_n1000_cpu}
python -m vecgossip +experiment=table1 -m nodes=1000 t_acq=10 R=1 alpha=null seed=0 degree=8,32 \
  method=vc,compression max_ticks=40 early_stop=false progress=false hydra.sweep.dir="$ROOT"
python results/copy_runs.py "$ROOT" results/tl_cost_n1000_cpu/runs
python results/tl_cost_n1000_cpu/cost.py results/tl_cost_n1000_cpu/runs > results/tl_cost_n1000_cpu/cost.md
