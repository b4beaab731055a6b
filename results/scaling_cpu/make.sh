#!/usr/bin/env bash
# The scaling study on a CPU (issue 25), in four parts that can run one after another or side by side
# (PART=rounds|vc|gossip|big; default: all, in that order):
#   rounds  the round engine's DFedAvgM with the CNN at m = 16 ... 256 (+experiment=scaling_rounds: 10 rounds)
#   vc      the tick engine's variance correction at N = 50 ... 2000 (+experiment=scaling: until most
#           nodes reach 90%, 1000 ticks at most): reach tick, seconds per tick, peak memory (~80 min
#           on one core, half of it N = 2000)
#   gossip  plain gossip at N = 50 ... 1000, 200 ticks (it plateaus far below 90%: only its time and memory)
#   big     plain gossip at N = 2000, 50 ticks: time per tick and memory only
# then the report (scaling.md / scaling.csv / scaling.png) over every part's runs. Resumable.
#   VECGOSSIP_DATA=../shared/data [PART=...] bash results/scaling_cpu/make.sh SWEEP_ROOT
#   (from a git worktree of a fixed commit when the checkout is being edited meanwhile, with
#    DEST=<the checkout>/results/scaling_cpu)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=${1:-runs/scaling_cpu}
DEST=${DEST:-results/scaling_cpu}
PART=${PART:-all}
copy() { python results/copy_runs.py "$ROOT" "$DEST/runs"; }
if [[ $PART == all || $PART == rounds ]]; then
  for m in 16 32 64 128 256; do     # one process per size: a sweep's jobs share one, and its heap
    python -m vecgossip +experiment=scaling_rounds clients=$m hydra.run.dir="$ROOT/rounds/m$m"   # keeps
  done; copy                        # up to 1.7 GiB of the previous job's (measured), which is not this run's peak
fi
if [[ $PART == all || $PART == vc ]]; then
  python -m vecgossip +experiment=scaling -m method=vc nodes=50,100,200,500,1000,2000 hydra.sweep.dir="$ROOT/vc"; copy
fi
if [[ $PART == all || $PART == gossip ]]; then
  python -m vecgossip +experiment=scaling -m method=gossip nodes=50,100,200,500,1000 max_ticks=200 \
    hydra.sweep.dir="$ROOT/gossip"; copy
fi
if [[ $PART == all || $PART == big ]]; then
  python -m vecgossip +experiment=scaling -m method=gossip nodes=2000 max_ticks=50 early_stop=false \
    hydra.sweep.dir="$ROOT/big"; copy
fi
python -m vecgossip.report "$DEST/runs" --out "$DEST" > /dev/null
