#!/usr/bin/env bash
# Build mtp_llm with ggml's Vulkan backend in its own venv and build directory, then run
# the GPU equality tests (tests/engine/test_gpu.py) on the Vulkan device: with Debian's
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

CACHE="${MTP_LLM_CACHE_DIR:-$HOME/.cache/mtp_llm}"
# Unpack Debian packages of another suite (never installed) into a cache folder: apt with a private list
# on the mirror this system's own Debian release comes from (MTP_LLM_DEBIAN_MIRROR names another).
unpack_debs() {  # unpack_debs SUITE DEST PACKAGE...
  local suite=$1 dest=$2; shift 2
  local codename mirror
  codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
  mirror="${MTP_LLM_DEBIAN_MIRROR:-$(apt-get indextargets --format '$(RELEASE) $(REPO_URI)' 2>/dev/null \
    | awk -v c="$codename" '$1 == c {print $2; exit}')}"
  [ -n "$mirror" ] || { echo "check_vulkan: no Debian mirror found in apt's sources; set MTP_LLM_DEBIAN_MIRROR" >&2; exit 1; }
  local apt; apt="$(mktemp -d)"; mkdir -p "$apt/lists/partial"
  echo "deb $mirror $suite main" > "$apt/sources.list"
  local opts=(-o "Dir::Etc::sourcelist=$apt/sources.list" -o Dir::Etc::sourceparts=- -o "Dir::State::Lists=$apt/lists"
              -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=)
  apt-get "${opts[@]}" update -qq
  (cd "$apt" && apt-get "${opts[@]}" download "${@/%//$suite}" 2>/dev/null)
  mkdir -p "$dest" && for deb in "$apt"/*.deb; do dpkg-deb -x "$deb" "$dest"; done
  rm -rf "$apt"
}

# ggml-vulkan needs Vulkan headers >= 1.3.261 (VK_EXT_layer_settings); Debian 12 ships 1.3.239. Take the
# headers (only) from Debian 13's libvulkan-dev.
VK_ARGS=()
if ! grep -q LayerSettingEXT /usr/include/vulkan/vulkan_structs.hpp 2>/dev/null; then
  HDR="$CACHE/vulkan-headers-trixie"
  [ -e "$HDR/usr/include/vulkan/vulkan.hpp" ] || unpack_debs trixie "$HDR" libvulkan-dev
  VK_ARGS=(-C "cmake.define.Vulkan_INCLUDE_DIR=$HDR/usr/include")
fi

# Debian 12's lavapipe (Mesa 22.3) frees a buffer object that its queue thread still holds: the hybrid
# full-offload cases crashed in 4 runs of 5 with it (docs/gpu.md). Run the tests on Mesa 25's lavapipe from
# bookworm-backports, unpacked beside the system driver; MTP_LLM_LAVAPIPE=system keeps the system's.
mesa="$(dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null || true)"
if [ "${MTP_LLM_LAVAPIPE:-}" != system ] && [ -n "$mesa" ] && dpkg --compare-versions "$mesa" lt 23; then
  LVP="$CACHE/lavapipe-bookworm-backports"
  [ -e "$LVP/lvp_icd.json" ] || unpack_debs bookworm-backports "$LVP" mesa-vulkan-drivers libdrm2 libdrm-amdgpu1
  driver="$(find "$LVP/usr/lib" -name libvulkan_lvp.so)"
  lib="$(dirname "$driver")"
  printf '{"file_format_version": "1.0.0", "ICD": {"library_path": "%s", "api_version": "1.3.0"}}\n' "$driver" \
    > "$LVP/lvp_icd.json"
  export VK_ICD_FILENAMES="$LVP/lvp_icd.json"
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "check_vulkan: lavapipe $(zcat "$LVP/usr/share/doc/mesa-vulkan-drivers/changelog.Debian.gz" | head -1 | cut -d' ' -f2) from $LVP" >&2
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
"${MTP_LLM_VENV:-.venv}/bin/python" tests/helpers/gpu_cases.py > build/gpu-reference.json
MTP_LLM_GPU_REFERENCE=build/gpu-reference.json exec "$PY" -m pytest tests/engine/test_gpu.py -p no:cacheprovider "$@"
