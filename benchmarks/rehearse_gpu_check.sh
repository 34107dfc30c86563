#!/usr/bin/env bash
# Rehearse benchmarks/gpu_check.sh on this machine, without a GPU, as far as it goes: a stand-in
# for the H200 image (Python 3.12 with the image's packages; cuBLAS only as PyTorch's pip wheel
# brings it; this machine's nvcc, which needs no GPU), then the script's build phase, which must
# build, import and stop at "no CUDA device", then tests/engine/test_gpu.py's CPU cases on that CUDA build.
# Needs nvcc and a Python 3.12 (MTP_LLM_PYTHON312). Cold: ~26 min on 2 cores; with a warm ccache: minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v nvcc >/dev/null || { echo "rehearse_gpu_check: needs nvcc (a CUDA toolkit; no GPU needed)" >&2; exit 1; }
PY312=""
for candidate in ${MTP_LLM_PYTHON312:-} "$HOME"/.pyenv/versions/3.12*/bin/python3.12 python3.12; do
  if "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then PY312="$candidate"; break; fi
done
[ -n "$PY312" ] || { echo "rehearse_gpu_check: needs Python 3.12 (set MTP_LLM_PYTHON312)" >&2; exit 1; }
VENV=build/gpu-standin-venv
OUTDIR=build/gpu-standin
[ -x "$VENV/bin/python" ] || "$PY312" -m venv "$VENV"
# The image's packages the check uses (device KINDS.md), and cuBLAS from its wheel.
"$VENV/bin/python" -m pip install -q --disable-pip-version-check numpy pybind11 scikit-build-core pytest pytest-timeout \
  cmake ninja pyyaml tqdm requests "nvidia-cublas>=13,<14"
bash benchmarks/pack_llama_cpp.sh >/dev/null
rm -rf "$OUTDIR"
start=$(date +%s)
if OUT="$OUTDIR" MTP_LLM_GPU_CHECK_PYTHON="$VENV/bin/python" bash benchmarks/gpu_check.sh build 2>"$OUTDIR.log"; then
  echo "rehearse_gpu_check: gpu_check.sh found a CUDA device: run it for real" >&2; exit 0
fi
cat "$OUTDIR.log" >&2
grep -q "the build has no CUDA device here" "$OUTDIR.log" \
  || { echo "rehearse_gpu_check: gpu_check.sh failed before the device check" >&2; exit 1; }
echo "rehearse_gpu_check: built and imported in $(( $(date +%s) - start ))s" >&2
cublas="$(dirname "$(ls "$VENV"/lib/python3.12/site-packages/nvidia/*/lib/libcublas.so.* | head -1)")"
LD_LIBRARY_PATH="$cublas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" MTP_LLM_GPU_REFERENCE=build/gpu-reference.json \
  "$VENV/bin/python" -m pytest tests/engine/test_gpu.py -q -p no:cacheprovider -o addopts="" -k "not dry_run"
