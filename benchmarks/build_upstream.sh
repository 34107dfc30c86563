#!/usr/bin/env bash
# Build llama.cpp's own llama-speculative-simple and llama-simple from the same pinned
# tree (and cached libraries) as the extension, into build/upstream/.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${MTP_LLM_VENV:-.venv}"
PYBIND_DIR="$("$VENV/bin/python" -m pybind11 --cmakedir)"
cmake -S . -B build/upstream -G Ninja -DCMAKE_BUILD_TYPE=Release -DMTP_LLM_UPSTREAM_TOOLS=ON \
  -Dpybind11_DIR="$PYBIND_DIR" -DPython_EXECUTABLE="$VENV/bin/python" >/dev/null
cmake --build build/upstream --target llama-speculative-simple llama-simple -j"$(nproc)"
ls -l build/upstream/llama-speculative-simple build/upstream/llama-simple
