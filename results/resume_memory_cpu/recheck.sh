#!/usr/bin/env bash
# The late-rise recheck (README, "pageout/recheck/"): the same cut-and-resume as make.sh (N = 500,
# VC, R = 4, 30 ticks, SIGINT after WAIT seconds, resumed), the resumed process's resident set split
# into anonymous and file pages with the tick it is at, every 0.25 s. From the repository root:
#   VECGOSSIP_DATA=../shared/data WAIT=12 bash results/resume_memory_cpu/recheck.sh RUN_DIR
set -u
D=${1:-runs/resume_recheck}; rm -rf $D; mkdir -p $D
A="method=vc nodes=500 R=4 seed=0 progress=true early_stop=false eval_every=10"
export OMP_NUM_THREADS=1 VECGOSSIP_DATA=${VECGOSSIP_DATA:-../shared/data}
python -m vecgossip $A max_ticks=30 hydra.run.dir=$D/cut > $D/cut.log 2>&1 &
P=$!; sleep ${WAIT:-12}; kill -INT $P; wait $P
python -m vecgossip $A max_ticks=30 hydra.run.dir=$D/cut > $D/resumed.log 2>&1 &
P=$!; : > $D/rss.txt   # time, VmRSS, RssAnon, RssFile (kB), tick/30
while kill -0 $P 2>/dev/null; do
  echo "$(date +%s.%N | cut -c1-14) $(awk '/VmRSS|RssAnon|RssFile/ {printf "%s ", $2}' /proc/$P/status 2>/dev/null) $(tail -c 300 $D/resumed.log | tr '\r' '\n' | grep -o '[0-9]*/30' | tail -1)" >> $D/rss.txt
  sleep 0.25
done
python -c "import json, sys; print(json.dumps(json.load(open(sys.argv[1]))['memory']))" $D/cut/summary.json
