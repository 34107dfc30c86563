#!/usr/bin/env bash
# The patch set on ARM, correctness only: cross-compile the patched llama.cpp's ggml for aarch64 and run the
# kernel test (tests/engine/test_kernels.py: benchmarks/small_batch_matmul.cpp check, against a double-precision
# reference and the one-column products) under qemu-user.
# Usage: bash scripts/check_aarch64.sh [ARCH ...]   (default: the instruction sets of the wheel's arm64 variants,
# armv8.0_1, armv8.2_1, armv8.2_3 and armv8.6_2; about 2 minutes each)
# Needs g++-aarch64-linux-gnu and qemu-user (installed with apt-get when run as root) and the .venv of setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v aarch64-linux-gnu-g++ >/dev/null || missing+=(g++-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null || missing+=(qemu-user)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2
  else
    echo "check_aarch64: install ${missing[*]} (apt-get)" >&2
    exit 1
  fi
fi
[ -x .venv/bin/python ] || { echo "check_aarch64: run scripts/setup.sh first (.venv)" >&2; exit 1; }
tree="$(.venv/bin/python cmake/fetch_llama_cpp.py)"
[ $# -gt 0 ] || set -- armv8-a armv8.2-a+dotprod armv8.2-a+dotprod+fp16+sve armv8.6-a+dotprod+fp16+sve+i8mm+sve2
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
status=0
for arch in "$@"; do
  build="$tree-build/Release-aarch64-cross-${arch//+/-}"
  start=$(date +%s)
  cmake -S "$tree" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
    -DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 \
    -DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc -DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++ \
    -DGGML_NATIVE=OFF -DGGML_CPU_ARM_ARCH="$arch" -DGGML_OPENMP=OFF -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build "$build" --target ggml ggml-cpu >/dev/null
  echo "check_aarch64: $arch built in $(( $(date +%s) - start ))s ($build)" >&2
  # the kernel test compiles the harness with the cross compiler (static) and runs it under qemu
  # ggml's own f16 products are ~1e-4 off the double reference on ARM: with +fp16 its dot product accumulates in
  # f16, without it the activations are rounded to f16 (tinyBLAS's f32 path is x86's); the relative check still holds
  half=1
  MTP_LLM_GGML_BUILD="$build" MTP_LLM_KERNEL_CXX="aarch64-linux-gnu-g++ -static" MTP_LLM_KERNEL_F16_HALF_ACCUMULATION="$half" \
  MTP_LLM_KERNEL_RUNNER="qemu-aarch64 -cpu max" \
    .venv/bin/python -m pytest -p no:cacheprovider -q tests/engine/test_kernels.py || status=1
done
exit $status
