#!/usr/bin/env bash
# Create the virtual environment and build the package (idempotent, incremental).
# llama.cpp is fetched once into ~/.cache/mtp_llm; objects are cached by ccache.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${MTP_LLM_VENV:-.venv}"
EXTRAS="${MTP_LLM_EXTRAS:-test,docs,langchain,llamaindex,bench,hub}"

if ! command -v ccache >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing ccache (compiler cache)" >&2
  (apt-get install -y -qq ccache >/dev/null 2>&1 || (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq ccache >/dev/null 2>&1)) || true
fi

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"
"$PY" -m pip install -q --disable-pip-version-check "scikit-build-core>=0.10" "pybind11>=2.12" ninja "cmake>=3.21"
start=$(date +%s)
"$PY" -m pip install -q --disable-pip-version-check --no-build-isolation -e ".[$EXTRAS]"
echo "setup: package built and installed in $(( $(date +%s) - start ))s" >&2
