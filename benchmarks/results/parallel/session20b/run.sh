#!/bin/bash
# Session 20 (second loop): after the ending and joining rules (session20/ holds the loop after the stale plain time fix alone).
exec bash "$(dirname "$0")/../../../parallel_goal_loop.sh" benchmarks/results/parallel/session20b 12
