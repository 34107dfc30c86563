#!/usr/bin/env bash
# The patch set beyond AVX-512: build llama.cpp and the extension for AVX2-class x86 CPUs
# (GGML_NATIVE=OFF with AVX, AVX2, FMA, F16C and BMI2 only: Intel Haswell and later, AMD Zen),
# in its own venv and build directories, check that no AVX-512 instruction was compiled in,
# then run the kernel check and the engine tests on that build.
# Usage: bash scripts/check_avx2.sh [pytest args]   (default: tests/engine)
# The build also runs under valgrind (which has no AVX-512): benchmarks/logprobs_cost.py uses it.
set -euo pipefail
cd "$(dirname "$0")/.."
export MTP_LLM_VENV=.venv-avx2
VENV="$MTP_LLM_VENV"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "scikit-build-core>=0.10" "pybind11>=2.12" ninja "cmake>=3.21"
start=$(date +%s)
ISA=(-C cmake.define.GGML_NATIVE=OFF -C cmake.define.GGML_SSE42=ON -C cmake.define.GGML_AVX=ON
     -C cmake.define.GGML_AVX2=ON -C cmake.define.GGML_FMA=ON -C cmake.define.GGML_F16C=ON
     -C cmake.define.GGML_BMI2=ON -C cmake.define.GGML_AVX512=OFF -C cmake.define.GGML_AVX_VNNI=OFF)
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation \
  "${ISA[@]}" -C build-dir=build/avx2-{wheel_tag} -e ".[test,langchain,llamaindex,bench]"
echo "check_avx2: built in $(( $(date +%s) - start ))s" >&2
tree="$("$VENV/bin/python" cmake/fetch_llama_cpp.py)"
build="$(ls -d "$tree"-build/Release-*-generic-sse42-avx-avx2-fma-f16c-bmi2 | tail -1)"
export MTP_LLM_GGML_BUILD="$build"  # the kernel test links this build's ggml archives
core="$(ls build/avx2-*/_core.*.so | head -1)"
zmm="$(objdump -d "$core" "$build"/ggml/src/libggml-cpu.a | grep -c '%zmm' || true)"
echo "check_avx2: $zmm AVX-512 (zmm) instructions in $core and libggml-cpu.a" >&2
[ "$zmm" = 0 ]
if [ $# = 0 ]; then set -- tests/engine; fi
exec "$VENV/bin/python" -m pytest -p no:cacheprovider "$@"
