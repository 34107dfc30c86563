#!/usr/bin/env bash
# The patch set on AVX2-class x86 CPUs (Intel Haswell and later, AMD Zen 1-3): checks that the build's `haswell`
# variant of ggml's CPU backend holds no AVX-512 instruction, then runs the engine tests with that variant forced
# (MTP_LLM_CPU_VARIANT=haswell) on this machine. MTP_LLM_CPU_VARIANT=sse42 (or any built variant) checks another.
# Usage: bash scripts/check_avx2.sh [pytest args]   (default: tests/engine)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${MTP_LLM_VENV:-.venv}"
variant="${MTP_LLM_CPU_VARIANT:-haswell}"
module="$("$VENV/bin/python" -c "import mtp_llm, pathlib; print(pathlib.Path(mtp_llm.cpu_backend().path).parent)")/libggml-cpu-$variant.so"
[ -f "$module" ] || { echo "check_avx2: $module missing: a build with run-time CPU variants is needed" >&2; exit 1; }
zmm="$(objdump -d "$module" | grep -c '%zmm' || true)"
echo "check_avx2: $zmm AVX-512 (zmm) instructions in $module" >&2
case "$variant" in haswell|alderlake|piledriver|ivybridge|sandybridge|sse42|x64) [ "$zmm" = 0 ];; esac
if [ $# = 0 ]; then set -- tests/engine; fi
MTP_LLM_CPU_VARIANT="$variant" MTP_LLM_KERNEL_VARIANTS="$variant" exec "$VENV/bin/python" -m pytest -p no:cacheprovider "$@"
