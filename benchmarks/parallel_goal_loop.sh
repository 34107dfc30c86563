#!/bin/bash
# Issue 32's three-run loop: `mtp-llm bench --parallel 1,2,4 --n-draft 1,2,3,4,auto` at acceptance 0.75 and forced,
# alternating, three times, --reps REPS (default 12: about 27 minutes on 2 cores). Run on a quiet machine.
# Usage: bash benchmarks/parallel_goal_loop.sh OUT_DIR [REPS]   (OUT_DIR/par-075-N, par-forced-N and log.txt)
set -u
cd "$(dirname "$0")/.."
O=$1
REPS=${2:-12}
mkdir -p "$O"
log() { echo "$(date -u +%H:%M:%S) $*" | tee -a "$O/log.txt"; }
log "load: $(cat /proc/loadavg)"
for i in 1 2 3; do
  log "parallel 0.75 run $i"
  .venv/bin/mtp-llm bench --synthetic 128M --acceptance 0.75 --format f16 --parallel 1,2,4 --n-draft 1,2,3,4,auto --tokens 96 --threads 2 --reps "$REPS" --out "$O/par-075-$i" > /dev/null 2>&1
  log "parallel forced run $i"
  .venv/bin/mtp-llm bench --synthetic 128M --format f16 --parallel 1,2,4 --n-draft 1,2,3,4,auto --tokens 96 --threads 2 --reps "$REPS" --out "$O/par-forced-$i" > /dev/null 2>&1
done
log "done"
