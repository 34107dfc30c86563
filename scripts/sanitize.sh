#!/usr/bin/env bash
# Memory-safety run: build llama.cpp and the extension with AddressSanitizer and
# UndefinedBehaviorSanitizer (own venv and build dir), then run the test suite under them.
# Usage: bash scripts/sanitize.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
export MTP_LLM_VENV=.venv-asan
VENV="$MTP_LLM_VENV"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "scikit-build-core>=0.10" "pybind11>=2.12" ninja "cmake>=3.21"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation \
  -C cmake.define.MTP_LLM_SANITIZE=ON -C build-dir=build/asan -e ".[test,langchain,llamaindex,bench]"
ASAN_LIB="$(gcc -print-file-name=libasan.so)"
# libstdc++ too: Python does not link it, and ASan's __cxa_throw interceptor must find the
# real one before the extension throws its first exception.
STDCXX_LIB="$(gcc -print-file-name=libstdc++.so)"
# Python itself is not instrumented and keeps objects alive at exit: leak checking is off,
# every other ASan/UBSan report aborts the run.
export LD_PRELOAD="$ASAN_LIB:$STDCXX_LIB"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:strict_string_checks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
exec "$VENV/bin/python" -m pytest -p no:cacheprovider "$@"
