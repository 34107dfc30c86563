#!/usr/bin/env bash
# Pack the fetched, patched llama.cpp tree, pruned to what a CUDA build needs (no models, docs,
# tools, tests, other backends), into build/llama.cpp-src.tar.gz (~4 MB, git-ignored), so that
# benchmarks/gpu_check.sh builds on a machine without network. The device tool carries it:
#   run(command="bash benchmarks/gpu_check.sh", carry=["build/llama.cpp-src.tar.gz", "build/gpu-reference.json", "build/wheels"])
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${MTP_LLM_VENV:-.venv}/bin/python"
SRC="$("$PY" cmake/fetch_llama_cpp.py)"
mkdir -p build
tar -C "$SRC" -czf build/llama.cpp-src.tar.gz \
  --exclude=./models --exclude=./docs --exclude=./tools --exclude=./examples --exclude=./tests \
  --exclude=./gguf-py --exclude=./media --exclude=./benches --exclude=./pocs --exclude=./app --exclude=./skills \
  --exclude=./conversion --exclude=./ci --exclude=./grammars --exclude='./.git*' \
  $(cd "$SRC/ggml/src" && for d in ggml-*/; do case "$d" in ggml-cpu/|ggml-cuda/) ;; *) echo "--exclude=./ggml/src/${d%/}";; esac; done) \
  .
# Pure-Python wheels the check needs beyond the machine's pybind11/scikit-build-core (no network there).
"$PY" -m pip download -q --disable-pip-version-check --only-binary=:all: -d build/wheels \
  gguf numpy pyyaml tqdm requests pytest pytest-asyncio pytest-timeout >/dev/null
# The CPU build's tokens and acceptance counts, the reference of the equality tests.
"$PY" tests/gpu_cases.py > build/gpu-reference.json
ls -l build/llama.cpp-src.tar.gz build/gpu-reference.json
