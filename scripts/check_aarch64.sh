#!/usr/bin/env bash
# The patch set on ARM, correctness only: cross-compile the patched llama.cpp's ggml for aarch64 and run the
# kernel test (tests/engine/test_kernels.py: benchmarks/small_batch_matmul.cpp check, against a double-precision
# reference and the one-column products) under qemu-user.
# Usage: bash scripts/check_aarch64.sh [ARCH ...]   (default: the instruction sets of the wheel's arm64 variants,
# armv8.0_1, armv8.2_1, armv8.2_3 and armv8.6_2; about 2 minutes each)
#        bash scripts/check_aarch64.sh --generate [CPU ...]   (default CPUs: cortex-a53 neoverse-n1 max)
# --generate builds what the arm64 wheel holds instead: the engine of csrc/ with ggml's CPU backend as run-time
# variants (GGML_BACKEND_DL, GGML_CPU_ALL_VARIANTS: libmtp_*.so and libggml-cpu-<variant>.so), driven by
# tools/generate_cli (mtp_generate, -DMTP_LLM_GENERATE_CLI=ON) instead of the Python extension. Under
# `qemu-aarch64 -cpu CPU` it loads the built-in model and generates greedily, plain and with MTP (n_draft 1 and 3),
# and checks that the variant loaded is the one cmake/cpu_variants.py picks for that CPU's features (CPU:VARIANT
# forces one), that MTP's tokens equal plain decoding's, and that plain decoding's tokens and top-2 log-probabilities
# equal this machine's package's (same prompt ids; the arm64 variants compute as x86's AVX2 ones, patch 0029)
# (tools/generate_cli/check.py). Run time on 2 cores: the build about
# 10 minutes (ccache partly warm; seconds once built), then 0.5-3 minutes a CPU (16 tokens three times under qemu;
# longer on a busy machine).
# MTP_LLM_AARCH64_TOKENS (16) sets the length.
#        bash scripts/check_aarch64.sh --tensors [VARIANT ...]   (default: every arm64 variant)
# --tensors builds the same and dumps every f32 graph tensor of the built-in model (tools/tensor_dump: a 100-token
# prompt, a decode, a 3-row verify) with each arm64 variant under `qemu-aarch64 -cpu max` and with this machine's
# package; it fails unless each is bit-equal to x86's (the host's variant must be one with FMA: piledriver, haswell
# and up; about 30 s a variant).
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
build=build/aarch64-generate
build_stage() {
  start=$(date +%s)
  # A copy of the fetched (patched) tree, named as a tree of one's own: the objects go to $build, not to the
  # cache's x86 keys, and a setup.sh that re-extracts the cache's tree meanwhile does not pull it from under the build
  # (cp -a keeps the files' times, so ninja rebuilds only what changed).
  mkdir -p "$build"
  rm -rf "$build/llama.cpp-tree"
  cp -a "$tree" "$build/llama.cpp-tree"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMTP_LLM_GENERATE_CLI=ON \
    -DMTP_LLM_LLAMA_CPP_DIR="$PWD/$build/llama.cpp-tree" -DPython_EXECUTABLE="$PWD/.venv/bin/python" \
    -DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 \
    -DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc -DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++ >/dev/null
  cmake --build "$build" --target mtp_generate >/dev/null
  rm -rf "$build/stage"
  cmake --install "$build" --component mtp_llm --prefix "$build/stage" >/dev/null
  echo "check_aarch64: engine and variants built in $(( $(date +%s) - start ))s ($build/stage/mtp_llm)" >&2
  ls "$build"/stage/mtp_llm >&2
}
if [ "${1:-}" = --generate ]; then
  shift
  [ $# -gt 0 ] || set -- cortex-a53 neoverse-n1 max
  build_stage
  exec .venv/bin/python tools/generate_cli/check.py "$build/stage/mtp_llm" "$@"
fi
if [ "${1:-}" = --tensors ]; then
  shift
  build_stage
  stage="$build/stage/mtp_llm"
  [ $# -gt 0 ] || set -- $(cd "$stage" && ls libggml-cpu-*.so | sed 's/^libggml-cpu-//; s/\.so$//')
  package="$(.venv/bin/python -P -c 'import mtp_llm._core as c, os; print(os.path.dirname(c.__file__))')"
  host_variant="$(.venv/bin/python -P -c 'import mtp_llm; print(mtp_llm.cpu_backend().variant)')"
  model="$(.venv/bin/python -P -c 'from mtp_llm.default_model import default_model_path; print(default_model_path())')"
  includes=(-I"$build/llama.cpp-tree/include" -I"$build/llama.cpp-tree/ggml/include")
  g++ -O1 -std=c++17 tools/tensor_dump/dump.cpp "${includes[@]}" -L"$package" -lmtp_llama -lmtp_ggml -lmtp_ggml-base \
    -Wl,-rpath,"$package" -o "$build/host_tensor_dump"
  aarch64-linux-gnu-g++ -O1 -std=c++17 tools/tensor_dump/dump.cpp "${includes[@]}" -L"$stage" -lmtp_llama -lmtp_ggml \
    -lmtp_ggml-base -Wl,-rpath,'$ORIGIN' -o "$stage/mtp_tensor_dump"
  dumps="$build/tensor_dumps"
  mkdir -p "$dumps"
  # llama.cpp's load log goes to a file, shown only when a dump fails
  "$build/host_tensor_dump" "$package/libggml-cpu-$host_variant.so" "$model" "$dumps/x86-$host_variant.bin" 100 \
    2>"$dumps/x86-$host_variant.log" || { tail -20 "$dumps/x86-$host_variant.log" >&2; exit 1; }
  status=0
  for variant in "$@"; do
    qemu-aarch64 -L /usr/aarch64-linux-gnu -cpu max "$stage/mtp_tensor_dump" "$stage/libggml-cpu-$variant.so" "$model" \
      "$dumps/$variant.bin" 100 2>"$dumps/$variant.log" || { tail -20 "$dumps/$variant.log" >&2; exit 1; }
    echo "check_aarch64 --tensors: $variant against x86-64 $host_variant (built-in model, 100-token prompt, a decode, a 3-row verify):"
    .venv/bin/python tools/tensor_dump/compare.py "$dumps/x86-$host_variant.bin" "$dumps/$variant.bin" || status=1
  done
  exit $status
fi
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
