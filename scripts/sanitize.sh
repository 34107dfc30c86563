#!/usr/bin/env bash
# Sanitizer runs: build llama.cpp and the extension instrumented (own venv and build dir), then
# run the test suite under them.
#   bash scripts/sanitize.sh [pytest args]            AddressSanitizer + UndefinedBehaviorSanitizer
#   bash scripts/sanitize.sh --thread [pytest args]   ThreadSanitizer (default tests: the parallel
#       engine, cancellation, the prompt cache and the integrations: THREAD_TESTS below)
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=address
if [ "${1:-}" = --thread ]; then
  MODE=thread
  shift
fi
if [ "$MODE" = thread ]; then
  export MTP_LLM_VENV=.venv-tsan
  BUILD=(-C cmake.define.MTP_LLM_TSAN=ON -C build-dir=build/tsan)
else
  export MTP_LLM_VENV=.venv-asan
  BUILD=(-C cmake.define.MTP_LLM_SANITIZE=ON -C build-dir=build/asan)
fi
VENV="$MTP_LLM_VENV"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "scikit-build-core>=0.10" "pybind11>=2.12" ninja "cmake>=3.21"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation \
  "${BUILD[@]}" -e ".[test,langchain,llamaindex,bench]"
# libstdc++ too: Python does not link it, and the sanitizer's __cxa_throw interceptor must find the
# real one before the extension throws its first exception.
STDCXX_LIB="$(gcc -print-file-name=libstdc++.so)"
if [ "$MODE" = thread ]; then
  THREAD_TESTS=(tests/engine/test_parallel.py tests/engine/test_cancel_concurrency.py tests/engine/test_prompt_cache.py
                tests/integrations/test_langchain.py tests/integrations/test_llamaindex.py)
  paths=0
  for arg in "$@"; do [[ "$arg" == tests* ]] && paths=1; done
  [ "$paths" = 1 ] || set -- "$@" "${THREAD_TESTS[@]}"
  export LD_PRELOAD="$(gcc -print-file-name=libtsan.so):$STDCXX_LIB"
  # Python itself is not instrumented: its own synchronisation is seen only through the pthread
  # calls TSan intercepts. Every report is printed; the run fails when there was one (exitcode).
  # Reports go to files (pytest captures the tests' stderr): build/tsan-reports/tsan.<pid>.
  REPORTS=build/tsan-reports
  rm -rf "$REPORTS" && mkdir -p "$REPORTS"
  export TSAN_OPTIONS="halt_on_error=0:exitcode=66:second_deadlock_stack=1:report_signal_unsafe=0:log_path=$PWD/$REPORTS/tsan:suppressions=$PWD/scripts/tsan.supp"
else
  # Python itself is not instrumented and keeps objects alive at exit: leak checking is off,
  # every other ASan/UBSan report aborts the run.
  export LD_PRELOAD="$(gcc -print-file-name=libasan.so):$STDCXX_LIB"
  export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:strict_string_checks=1"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
fi
if [ "$MODE" = thread ]; then
  rc=0
  "$VENV/bin/python" -m pytest -p no:cacheprovider "$@" || rc=$?
  n=$(cat "$REPORTS"/tsan.* 2>/dev/null | grep -c "^WARNING: ThreadSanitizer" || true)
  echo "sanitize: $n ThreadSanitizer reports (in $REPORTS)" >&2
  grep -h -A12 "^WARNING: ThreadSanitizer" "$REPORTS"/tsan.* 2>/dev/null | head -200 >&2 || true
  [ "$n" = 0 ] || exit 66
  exit "$rc"
fi
exec "$VENV/bin/python" -m pytest -p no:cacheprovider "$@"
