#!/bin/bash
# Session 23 (AMD EPYC family 26 model 2, Zen 5, 2 vCPUs): issue 32's loop after loop-a's controller, with a round's cost
# taken as its period (from its start to the next round's start).
exec bash "$(dirname "$0")/../../../../parallel_goal_loop.sh" benchmarks/results/parallel/session23/loop-b 16
