#!/bin/bash
# Session 21, second loop (a noisy machine: per-repetition ratios 0.6-1.5): issue 32's three-run loop at --reps 12 after padding, per-shape probe intervals and no
# several-streams margin. Run quiet (nothing else busy).
set -u
cd "$(dirname "$0")/../../../../.."
O=benchmarks/results/parallel/session21/loop2
log() { echo "$(date -u +%H:%M:%S) $*" | tee -a $O/log.txt; }
log "load: $(cat /proc/loadavg)"
for i in 1 2 3; do
  log "parallel 0.75 run $i"
  .venv/bin/mtp-llm bench --synthetic 128M --acceptance 0.75 --format f16 --parallel 1,2,4 --n-draft 1,2,3,4,auto --tokens 96 --threads 2 --reps 12 --out $O/par-075-$i > /dev/null 2>&1
  log "parallel forced run $i"
  .venv/bin/mtp-llm bench --synthetic 128M --format f16 --parallel 1,2,4 --n-draft 1,2,3,4,auto --tokens 96 --threads 2 --reps 12 --out $O/par-forced-$i > /dev/null 2>&1
done
log "done"
