#!/bin/bash
# Session 21 (loop2): issue 32's loop after padding, per-shape probe intervals and no several-streams margin.
exec bash "$(dirname "$0")/../../../../parallel_goal_loop.sh" benchmarks/results/parallel/session21/loop2
