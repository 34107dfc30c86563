#!/bin/bash
# Session 19: issue 32's three-run loop (the bench of session 18, --reps 9), after the controller and catch-up changes.
exec bash "$(dirname "$0")/../../../parallel_goal_loop.sh" benchmarks/results/parallel/session19 9
