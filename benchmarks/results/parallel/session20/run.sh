#!/bin/bash
# Session 20: issue 32's three-run loop (--reps 12), after plain decoding's stale time is measured again.
exec bash "$(dirname "$0")/../../../parallel_goal_loop.sh" benchmarks/results/parallel/session20 12
