#!/usr/bin/env bash
# One-shot NVIDIA check (one 10-minute command on a 16-core H200 machine, no network):
# CUDA build for one architecture, the tiny-model equality tests against the CPU build's
# reference, then `mtp-llm bench` on the built-in model and on synthetic memory-bound ~1B and
# ~3B models, all layers offloaded, and 1 against 4 parallel streams on the 1B one.
# Prepare here with `bash benchmarks/pack_llama_cpp.sh`, then
#   run(command="bash benchmarks/gpu_check.sh", carry=["build/llama.cpp-src.tar.gz", "build/gpu-reference.json", "build/wheels"])
# Tables land in $OUT (or build/gpu-check). MTP_LLM_GPU_CHECK_DRY_RUN=1 stops before nvcc is needed.
set -euo pipefail
cd "$(dirname "$0")/.."
ARCH="${CUDA_ARCH:-90}"
OUTDIR="${OUT:-build/gpu-check}"
mkdir -p "$OUTDIR"
log() { echo "gpu_check: $*" >&2; }
t0=$(date +%s)

[ -f build/llama.cpp-src.tar.gz ] || { log "build/llama.cpp-src.tar.gz missing: run benchmarks/pack_llama_cpp.sh and carry it"; exit 2; }
[ -f build/gpu-reference.json ] || { log "build/gpu-reference.json missing (benchmarks/pack_llama_cpp.sh writes it)"; exit 2; }
SRC="$PWD/build/llama.cpp-src"
rm -rf "$SRC" && mkdir -p "$SRC" && tar -C "$SRC" -xzf build/llama.cpp-src.tar.gz
export MTP_LLM_LLAMA_CPP_DIR="$SRC"   # no fetch: the packed (patched, pruned) tree
log "llama.cpp tree unpacked ($(du -sh "$SRC" | cut -f1))"

VENV=build/gpu-venv
python3 -m venv --system-site-packages "$VENV"   # the machine's pybind11, scikit-build-core, numpy
PY="$VENV/bin/python"
"$PY" -m pip install -q --no-index --find-links build/wheels gguf numpy pytest pytest-asyncio pytest-timeout 2>/dev/null || true
"$PY" - <<'PYEOF'
import importlib.util, sys
missing = [m for m in ("pybind11", "scikit_build_core", "numpy", "gguf", "pytest") if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"gpu_check: missing Python packages (no network here): {', '.join(missing)}")
PYEOF
command -v ninja >/dev/null || log "ninja not found: the build uses make"

if [ -n "${MTP_LLM_GPU_CHECK_DRY_RUN:-}" ] || ! command -v nvcc >/dev/null; then
  # Configure (CPU only) on the packed tree: it must be complete without the network.
  cmake -S . -B build/gpu-check-configure -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -Dpybind11_DIR="$("$PY" -m pybind11 --cmakedir)" -DPython_EXECUTABLE="$PY" >"$OUTDIR/configure.log" 2>&1 \
    || { log "configure of the packed tree failed: $OUTDIR/configure.log"; exit 1; }
  log "dry run: the packed tree configures; stopping before the CUDA build (nvcc: $(command -v nvcc || echo none))"
  exit 0
fi

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUTDIR/gpu.txt"
log "building with CUDA for sm_$ARCH on $(nproc) cores"
CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$PY" -m pip install -q --no-deps --no-build-isolation --no-index -e . \
  -C build-dir=build/cuda-{wheel_tag} -C cmake.define.GGML_CUDA=ON \
  -C cmake.define.CMAKE_CUDA_ARCHITECTURES="$ARCH" >"$OUTDIR/build.log" 2>&1 \
  || { tail -40 "$OUTDIR/build.log"; exit 1; }
log "built in $(( $(date +%s) - t0 ))s"
"$PY" -m mtp_llm info | tee "$OUTDIR/info.json" >/dev/null

MTP_LLM_GPU_REFERENCE=build/gpu-reference.json MTP_LLM_TEST_THREADS=4 \
  "$PY" -m pytest tests/test_gpu.py -q -p no:cacheprovider -o addopts="" 2>&1 | tee "$OUTDIR/tests.txt" | tail -5

bench() {  # name, then mtp-llm bench arguments
  local name=$1; shift
  log "bench $name ($(( $(date +%s) - t0 ))s so far)"
  "$PY" -m mtp_llm bench --n-gpu-layers -1 --n-draft 1,2,3 --tokens 128 --reps 2 --no-progress \
    --out "$OUTDIR/$name" "$@" >"$OUTDIR/$name.log" 2>&1 || tail -20 "$OUTDIR/$name.log"
}
bench builtin
bench synthetic-1B --synthetic 1B --acceptance 0.75
bench synthetic-3B --synthetic 3B --acceptance 0.75
bench parallel-1B --synthetic 1B --acceptance 0.75 --parallel 1,4 --n-draft 2,auto   # issue 16 on the GPU
for f in "$OUTDIR"/*/bench.md "$OUTDIR"/*/parallel.md; do echo "## $f"; cat "$f"; done | tee "$OUTDIR/tables.md"
log "done in $(( $(date +%s) - t0 ))s; results in $OUTDIR"
