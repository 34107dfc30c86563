#!/bin/bash
# Session 23 (AMD EPYC family 26 model 2, Zen 5, 2 vCPUs): issue 32's loop after loop-b's build, with several streams breaking a
# near tie (within 4%) between plain decoding and drafting in favour of drafting.
exec bash "$(dirname "$0")/../../../../parallel_goal_loop.sh" benchmarks/results/parallel/session23/loop-c 16
