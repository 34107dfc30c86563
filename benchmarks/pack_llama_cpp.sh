#!/usr/bin/env bash
# Pack the fetched, patched llama.cpp tree, pruned to what a CUDA build needs (no models, docs,
# tools, tests, other backends), into build/llama.cpp-src.tar.gz (~4 MB, git-ignored), so that
# benchmarks/gpu_check.sh builds on a machine without network. The device tool carries it:
#   run(command="bash benchmarks/gpu_check.sh build", carry=["build/llama.cpp-src.tar.gz", "build/gpu-reference.json", "build/wheels"]), then "... run"
# --tree-only packs just the tree; MTP_LLM_GPU_CHECK_BUILD (default build) is where it all goes.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${MTP_LLM_VENV:-.venv}/bin/python"
SRC="$("$PY" cmake/fetch_llama_cpp.py)"
BUILD="${MTP_LLM_GPU_CHECK_BUILD:-build}"
mkdir -p "$BUILD"
tar -C "$SRC" -czf "$BUILD/llama.cpp-src.tar.gz" \
  --exclude=./models --exclude=./docs --exclude=./tools --exclude=./examples --exclude=./tests \
  --exclude=./gguf-py --exclude=./media --exclude=./benches --exclude=./pocs --exclude=./app --exclude=./skills \
  --exclude=./conversion --exclude=./ci --exclude=./grammars --exclude='./.git*' \
  $(cd "$SRC/ggml/src" && for d in ggml-*/; do case "$d" in ggml-cpu/|ggml-cuda/|ggml-rpc/) ;; *) echo "--exclude=./ggml/src/${d%/}";; esac; done) \
  .
[ "${1:-}" = --tree-only ] && exit 0
# The pure-Python packages the check needs beyond the H200 image's (which has numpy, pybind11,
# scikit-build-core, pytest): this venv's versions, as wheels (no network there).
pins="$("$PY" -c 'import importlib.metadata as m; print(" ".join(f"{p}=={m.version(p)}" for p in ("gguf", "pytest-asyncio", "typing-extensions")))')"
"$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$BUILD/wheels" $pins >/dev/null
# The CPU build's tokens and acceptance counts, the reference of the equality tests.
"$PY" tests/helpers/gpu_cases.py > "$BUILD/gpu-reference.json"
ls -l "$BUILD/llama.cpp-src.tar.gz" "$BUILD/gpu-reference.json"
