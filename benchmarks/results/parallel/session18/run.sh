#!/bin/bash
# Session 18: issue 32's three-run loop with the call-level interleaved bench, --reps 9.
set -u
cd /work/main
O=build/quiet/s18
mkdir -p $O
log() { echo "$(date -u +%H:%M:%S) $*" | tee -a $O/log.txt; }
log "load: $(cat /proc/loadavg)"
for i in 1 2 3; do
  log "parallel forced run $i"
  .venv/bin/mtp-llm bench --synthetic 128M --format f16 --parallel 1,2,4 --n-draft 1,2,3,4,auto --tokens 96 --threads 2 --reps 9 --out $O/par-forced-$i > $O/par-forced-$i.txt 2>&1
  log "parallel 0.75 run $i"
  .venv/bin/mtp-llm bench --synthetic 128M --acceptance 0.75 --format f16 --parallel 1,2,4 --n-draft 1,2,3,4,auto --tokens 96 --threads 2 --reps 9 --out $O/par-075-$i > $O/par-075-$i.txt 2>&1
done
log "done"
