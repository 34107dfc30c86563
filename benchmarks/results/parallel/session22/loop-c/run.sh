#!/bin/bash
# Session 22 (third loop, same controller as loop-a and loop-b): issue 32's loop after steps down with several streams alternate between plain decoding and one draft
# fewer (16 repetitions a run: this machine's rounds varied +-20% within seconds today).
exec bash "$(dirname "$0")/../../../../parallel_goal_loop.sh" benchmarks/results/parallel/session22/loop-c 16
