#!/usr/bin/env bash
# The main job: set up, then stream a completion from the built-in default model with MTP
# and print the speculative-decoding stats. Extra arguments go to `mtp-llm generate`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
VENV="${MTP_LLM_VENV:-.venv}"
if [ "$#" -eq 0 ]; then
  set -- "ROMEO: But soft, what light through yonder window breaks?"
fi
exec "$VENV/bin/mtp-llm" generate "$@"
