#!/usr/bin/env bash
# The main job: set up, then stream the built-in default model's answer to a chat question
# with MTP and print the speculative-decoding stats. Extra arguments go to `mtp-llm generate`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
VENV="${MTP_LLM_VENV:-.venv}"
if [ "$#" -eq 0 ]; then
  set -- --chat "Why is the sky blue?"
fi
exec "$VENV/bin/mtp-llm" generate "$@"
