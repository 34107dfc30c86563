#!/bin/bash
# Session 23 (AMD EPYC family 26 model 2, Zen 5, 2 vCPUs): issue 32's loop after several streams compare lengths by
# relative costs taken at one moment (a length's first steady rounds against the previous length's last ones).
exec bash "$(dirname "$0")/../../../../parallel_goal_loop.sh" benchmarks/results/parallel/session23/loop-a 16
