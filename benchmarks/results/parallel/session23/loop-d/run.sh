#!/bin/bash
# Session 23 (AMD EPYC family 26 model 2, Zen 5, 2 vCPUs): issue 32's loop after loop-c's build, with several streams backing off
# tries of a neighbour more than 5% behind, and each length of a new number of streams seeded from the nearest that measured it.
exec bash "$(dirname "$0")/../../../../parallel_goal_loop.sh" benchmarks/results/parallel/session23/loop-d 16
