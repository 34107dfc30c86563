#!/bin/bash
# Session 22: the 0.75 bench with the controller's trace, two runs per build (17:58-18:31 UTC):
#   f75-1, f75-2: main at 8610807 (the trace then also held the fixed lengths' sessions' lines)
#   g75-1, g75-2: the trace opens on the first choice (auto sessions only), controller unchanged
#   h75-1, h75-2: steps down from 2+ alternate between plain decoding and one draft fewer (a2f2b12)
#   ff-1 (19:15): forced acceptance (no --acceptance), the same build as h75
# Traces (30k lines each) are not kept; this script summarises each with benchmarks/controller_trace.py show.
set -eu
cd "$(dirname "$0")/../../../../.."
for i in 1 2; do
  MTP_LLM_CONTROLLER_TRACE=/tmp/trace-$i.txt .venv/bin/mtp-llm bench --synthetic 128M --acceptance 0.75 --format f16 \
    --parallel 1,2,4 --n-draft 1,2,3,4,auto --tokens 96 --threads 2 --reps 12 --out "benchmarks/results/parallel/session22/traced/run-$i" --no-progress
  python benchmarks/controller_trace.py show /tmp/trace-$i.txt
done
