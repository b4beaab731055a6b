#!/usr/bin/env bash
# Memory of a resumed run (results/resume_memory_cpu/README.md): a fresh run (N = 500, VC, R = 4,
# 30 ticks) and the same run stopped by SIGINT after WAIT seconds (a checkpoint) and resumed; the
# resumed process's resident set is sampled every 0.5 s, and each summary.json's measured peak.
#   VECGOSSIP_DATA=../shared/data bash results/resume_memory_cpu/make.sh RUN_DIR
set -u
D=${1:-runs/resume_memory}; rm -rf $D; mkdir -p $D
A="method=vc nodes=500 R=4 seed=0 progress=false early_stop=false eval_every=10"
export OMP_NUM_THREADS=1 VECGOSSIP_DATA=${VECGOSSIP_DATA:-../shared/data}
python -m vecgossip $A max_ticks=30 hydra.run.dir=$D/fresh > $D/fresh.log 2>&1
python -m vecgossip $A max_ticks=30 hydra.run.dir=$D/cut > $D/cut.log 2>&1 &
P=$!; sleep ${WAIT:-25}; kill -INT $P; wait $P; tail -1 $D/cut.log
python -m vecgossip $A max_ticks=30 hydra.run.dir=$D/cut > $D/resumed.log 2>&1 &
P=$!; : > $D/rss.txt
while kill -0 $P 2>/dev/null; do echo "$(date +%s.%N | cut -c1-14) $(grep VmRSS /proc/$P/status 2>/dev/null | awk '{print $2}')" >> $D/rss.txt; sleep 0.5; done
echo "resumed RSS (GB) over time:"; awk '$2 != "" {printf "%.2f ", $2/1e6}' $D/rss.txt; echo
python - $D <<'PY'
import json, sys
with open(f"{sys.argv[1]}/peaks.jsonl", "w") as f:
    for r in ("fresh", "cut"):
        s = json.load(open(f"{sys.argv[1]}/{r}/summary.json"))
        row = {"run": r, "memory": s["memory"], "ticks_run": s["ticks_run"], "final_acc_mean": s["final_acc_mean"]}
        print(json.dumps(row)); f.write(json.dumps(row) + "\n")
PY
