#!/bin/bash
# Session 18: issue 32 at 0.75 only, --reps 15, three runs.
set -u
cd /work/main
O=build/quiet/s18b
mkdir -p $O
log() { echo "$(date -u +%H:%M:%S) $*" | tee -a $O/log.txt; }
log "load: $(cat /proc/loadavg)"
for i in 1 2 3; do
  log "parallel 0.75 run $i"
  .venv/bin/mtp-llm bench --synthetic 128M --acceptance 0.75 --format f16 --parallel 1,2,4 --n-draft 1,2,3,4,auto --tokens 96 --threads 2 --reps 15 --out $O/par-075-$i > $O/par-075-$i.txt 2>&1
done
log "done"
