#!/usr/bin/env bash
# Check the portable wheel as a user gets it:
#   1. build it (scripts/build_wheel.sh), or take the wheel given as $1;
#   2. install it in a fresh venv whose PATH has no compiler or cmake (CC=CXX=/bin/false), binaries only;
#   3. the main job's first token from there, the built-in model fetched from the package index into an empty cache,
#      each part timed;
#   4. the engine tests against the installed wheel (a copy of tests/ outside the source tree);
#   5. the same greedy generation under each x86 CPU model of qemu-user whose instructions TCG runs (qemu64, Nehalem,
#      SandyBridge, IvyBridge, Opteron_G5, Haswell): each must load its variant (x64, sse42, sandybridge, ivybridge,
#      piledriver, haswell), decode MTP == plain, and print the tokens a native run of that variant does.
# CHECK_WHEEL_TESTS=0 skips step 4; CHECK_WHEEL_QEMU=0 skips step 5. Run from the repository root.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DEV_CACHE="${MTP_LLM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mtp_llm}"
if [ $# -ge 1 ]; then
  wheel=$(realpath "$1")
else
  wheel=$(bash scripts/build_wheel.sh | tail -n 1)
  wheel=$(realpath "$wheel")
fi
echo "check_wheel: $wheel ($(du -h "$wheel" | cut -f1))"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A PATH with the basic tools and no compiler, linker or cmake.
mkdir -p "$work/bin"
for tool in sh bash env ls cat cp mkdir rm mv ln uname id date sed grep tail head sort tr cut dirname basename \
            readlink realpath mktemp touch find xargs wc tar gzip; do
  src=$(command -v "$tool" || true)
  [ -n "$src" ] && ln -s "$src" "$work/bin/$tool"
done
python3 -m venv "$work/venv"
VPY="$work/venv/bin/python"
cd "$work"   # not the source tree: `import mtp_llm` must find the installed wheel
nocompiler=(env -u CMAKE_ARGS PATH="$work/venv/bin:$work/bin" CC=/bin/false CXX=/bin/false
            MTP_LLM_CACHE_DIR="$work/cache" HOME="$work/home")
mkdir -p "$work/home"
for tool in cc gcc g++ c++ clang cmake ninja ld; do
  if "${nocompiler[@]}" sh -c "command -v $tool" >/dev/null 2>&1; then
    echo "check_wheel: $tool is on the check's PATH" >&2; exit 1
  fi
done

t0=$(date +%s.%N)
"${nocompiler[@]}" "$VPY" -m pip install -q --disable-pip-version-check --only-binary :all: "$wheel"
t1=$(date +%s.%N)
"${nocompiler[@]}" "$VPY" -c "from mtp_llm.default_model import default_model_path; default_model_path()"
t2=$(date +%s.%N)
first=$("${nocompiler[@]}" "$VPY" "$ROOT/scripts/check_wheel.py" 16)
echo "check_wheel: native run: $first"
"$VPY" - "$t0" "$t1" "$t2" "$first" <<'EOF'
import json, sys
t0, t1, t2 = map(float, sys.argv[1:4]); run = json.loads(sys.argv[4])
parts = [("pip install (binaries only)", t1 - t0), ("built-in model fetched from the package index and built", t2 - t1),
         ("import", run["import_s"]), ("model load", run["load_s"]), ("first token", run["first_token_s"])]
print("check_wheel: " + "; ".join(f"{name} {sec:.1f}s" for name, sec in parts)
      + f"; install to first token {sum(sec for _, sec in parts):.1f}s")
assert run["mtp_tokens"] == run["plain_tokens"], "MTP != plain"
EOF

if [ "${CHECK_WHEEL_TESTS:-1}" != 0 ]; then
  "${nocompiler[@]}" "$VPY" -m pip install -q --disable-pip-version-check --only-binary :all: \
      pytest pytest-asyncio pytest-timeout hypothesis jsonschema langchain-core llama-index-core matplotlib
  mkdir -p "$work/src"
  (cd "$ROOT" && cp -r tests tools cmake patches benchmarks pyproject.toml "$work/src/")
  # The tests read the pinned llama.cpp tree (chat templates) and the built-in model from the developer's cache.
  # test_kernels and the GPU check's dry run build with a compiler and CMake, which this venv lacks by design
  # (both run in the suite).
  (cd "$work/src" && "${nocompiler[@]}" MTP_LLM_CACHE_DIR="$DEV_CACHE" "$VPY" -m pytest -q -p no:cacheprovider \
      -p no:randomly tests/engine --deselect tests/engine/test_kernels.py \
      --deselect tests/engine/test_gpu.py::test_gpu_check_dry_run ${CHECK_WHEEL_PYTEST_ARGS:-})
fi

if [ "${CHECK_WHEEL_QEMU:-1}" != 0 ]; then
  if ! command -v qemu-x86_64 >/dev/null 2>&1; then
    apt-get install -y -qq qemu-user >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq qemu-user)
  fi
  qemu=$(command -v qemu-x86_64)
  for pair in qemu64:x64 Nehalem:sse42 SandyBridge:sandybridge IvyBridge:ivybridge Opteron_G5:piledriver \
              Haswell:haswell; do
    cpu=${pair%%:*}; variant=${pair##*:}
    model=$("$VPY" -c "import json, sys; print(json.loads(sys.argv[1])['model_path'])" "$first")
    native=$(MTP_LLM_CPU_VARIANT=$variant "${nocompiler[@]}" "$VPY" "$ROOT/scripts/check_wheel.py" 8 "$model")
    # qemu warns of each CPUID feature of the model TCG lacks (x2apic, fma4, ...): none is an instruction ggml uses
    emulated=$("${nocompiler[@]}" "$qemu" -cpu "$cpu" "$VPY" "$ROOT/scripts/check_wheel.py" 8 "$model" \
      2> >(grep -v "TCG doesn't support requested feature" >&2))
    echo "check_wheel: qemu -cpu $cpu: $emulated"
    "$VPY" - "$variant" "$native" "$emulated" "$first" <<'EOF'
import json, sys
variant, native, emulated, best = sys.argv[1], *map(json.loads, sys.argv[2:5])
assert emulated["variant"] == variant, f"qemu loaded {emulated['variant']}, expected {variant}"
assert emulated["mtp_tokens"] == emulated["plain_tokens"], "MTP != plain under qemu"
assert emulated["mtp_tokens"] == native["mtp_tokens"], "qemu's tokens differ from a native run of the same variant"
same = emulated["mtp_tokens"] == best["mtp_tokens"][: len(emulated["mtp_tokens"])]
print(f"check_wheel: {variant} under qemu: the native {variant} run's tokens; the best variant's too: {same}")
EOF
  done
fi
echo "check_wheel: all passed"
