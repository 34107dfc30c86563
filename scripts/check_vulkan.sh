#!/usr/bin/env bash
# Build mtp_llm with ggml's Vulkan backend in its own venv and build directory, then run
# the GPU equality tests (tests/test_gpu.py) on the Vulkan device: with Debian's
# mesa-vulkan-drivers that is lavapipe, Vulkan in software on the CPU, so this runs on any machine.
#   apt-get install libvulkan-dev glslc spirv-headers mesa-vulkan-drivers   (the script does it when run as root)
# Not part of scripts/test.sh: the first build compiles ~150 shaders (tens of minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${MTP_LLM_VULKAN_VENV:-.venv-vulkan}"

if ! command -v glslc >/dev/null 2>&1 || [ ! -e /usr/include/vulkan/vulkan.h ] || [ ! -d /usr/share/cmake/SPIRV-Headers ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "check_vulkan: installing libvulkan-dev glslc spirv-headers mesa-vulkan-drivers" >&2
    apt-get install -y -qq libvulkan-dev glslc spirv-headers mesa-vulkan-drivers >/dev/null 2>&1 \
      || (apt-get update -qq && apt-get install -y -qq libvulkan-dev glslc spirv-headers mesa-vulkan-drivers >/dev/null)
  else
    echo "check_vulkan: needs glslc and the Vulkan headers (apt-get install libvulkan-dev glslc spirv-headers mesa-vulkan-drivers)" >&2
    exit 1
  fi
fi

# ggml-vulkan needs Vulkan headers >= 1.3.261 (VK_EXT_layer_settings); Debian 12 ships 1.3.239. Take the
# headers (only) from Debian 13's libvulkan-dev, fetched with apt into a private list, unpacked in the cache.
VK_ARGS=()
if ! grep -q LayerSettingEXT /usr/include/vulkan/vulkan_structs.hpp 2>/dev/null; then
  HDR="${MTP_LLM_CACHE_DIR:-$HOME/.cache/mtp_llm}/vulkan-headers-trixie"
  if [ ! -e "$HDR/usr/include/vulkan/vulkan.hpp" ]; then
    APT="$(mktemp -d)"; mkdir -p "$APT/lists/partial"
    echo "deb http://deb.debian.org/debian trixie main" > "$APT/sources.list"
    opts=(-o "Dir::Etc::sourcelist=$APT/sources.list" -o Dir::Etc::sourceparts=- -o "Dir::State::Lists=$APT/lists"
          -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=)
    apt-get "${opts[@]}" update -qq
    (cd "$APT" && apt-get "${opts[@]}" download libvulkan-dev 2>/dev/null)
    mkdir -p "$HDR" && dpkg-deb -x "$APT"/libvulkan-dev_*.deb "$HDR"
    rm -rf "$APT"
  fi
  VK_ARGS=(-C "cmake.define.Vulkan_INCLUDE_DIR=$HDR/usr/include")
fi

[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
PY="$VENV/bin/python"
"$PY" -m pip install -q --disable-pip-version-check "scikit-build-core>=0.10" "pybind11>=2.12" ninja "cmake>=3.21"
start=$(date +%s)
# Its own scikit-build directory; llama.cpp's objects go to <cache>/llama.cpp-…-build/<key>-vulkan.
"$PY" -m pip install -q --disable-pip-version-check --no-build-isolation -e ".[test]" \
  -C build-dir=build/vulkan-{wheel_tag} -C cmake.define.GGML_VULKAN=ON "${VK_ARGS[@]}"
echo "check_vulkan: built in $(( $(date +%s) - start ))s" >&2
# ggml-vulkan skips CPU-type Vulkan devices (lavapipe) unless they are named.
export GGML_VK_VISIBLE_DEVICES="${GGML_VK_VISIBLE_DEVICES:-0}"
"$PY" -m mtp_llm info
# The CPU build's tokens and acceptance counts (scripts/setup.sh's venv) are the reference.
mkdir -p build
"${MTP_LLM_VENV:-.venv}/bin/python" tests/gpu_cases.py > build/gpu-reference.json
MTP_LLM_GPU_REFERENCE=build/gpu-reference.json exec "$PY" -m pytest tests/test_gpu.py -p no:cacheprovider "$@"
