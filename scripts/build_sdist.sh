#!/usr/bin/env bash
# Build a self-contained sdist into dist/ (MTP_LLM_DIST names another folder): it ships the pristine part of the
# pinned llama.cpp that the build reads (third_party/llama.cpp-<version>-<sha>/, each file in its SHA256SUMS), so
# `pip install mtp_llm-*.tar.gz` downloads nothing (MTP_LLM_OFFLINE=1 makes sure of it).
# The build tools live in an environment of their own: .venv-wheel (MTP_LLM_WHEEL_VENV moves it).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${MTP_LLM_WHEEL_VENV:-.venv-wheel}"
OUT="${MTP_LLM_DIST:-dist}"

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"
"$PY" -m pip install -q --disable-pip-version-check build "scikit-build-core>=0.10" "pybind11>=2.12" ninja "cmake>=3.21"

# The pinned llama-cpp-python sdist comes from the cache (fetched once, sha256 checked); only one tree is vendored.
rm -rf third_party
"$PY" cmake/fetch_llama_cpp.py --vendor third_party >/dev/null
echo "build_sdist: vendored $(du -sh third_party | cut -f1) of llama.cpp into third_party/" >&2

"$PY" -m build --sdist --no-isolation -o "$OUT" >&2
sdist="$(ls -t "$OUT"/mtp_llm-*.tar.gz | head -n 1)"
files="$(tar tzf "$sdist" | grep -vc '/$')"
echo "build_sdist: $sdist: $(du -h "$sdist" | cut -f1) ($(stat -c %s "$sdist") bytes, $files files)" >&2
echo "$sdist"
