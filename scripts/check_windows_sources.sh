#!/usr/bin/env bash
# Compile-check the engine for Windows without a Windows machine: every csrc/ source but the pybind11 bindings, and
# the patched ggml RPC client, through MinGW-w64's g++ (-fsyntax-only, C++17), against the pinned llama.cpp tree.
# It finds what a POSIX-only header or call would break in the Windows wheel's build: sockets need Winsock, and the
# POSIX headers MinGW has but MSVC (the workflow's compiler) lacks (dirent.h, unistd.h, dlfcn.h, ...) are replaced by
# ones that fail. Other MSVC-only rules it cannot check. Installs g++-mingw-w64 with apt when missing. Run from the
# repository root after scripts/setup.sh (it reads the build's patched RPC copy).
set -euo pipefail
cd "$(dirname "$0")/.."
CXX=x86_64-w64-mingw32-g++-posix
if ! command -v "$CXX" >/dev/null 2>&1; then
  apt-get install -y -qq g++-mingw-w64-x86-64-posix >/dev/null 2>&1 ||
    (apt-get update -qq && apt-get install -y -qq g++-mingw-w64-x86-64-posix >/dev/null)
fi
VENV="${MTP_LLM_VENV:-.venv}"
TREE="$("$VENV/bin/python" cmake/fetch_llama_cpp.py)"
RPC=$(ls -d build/cp3*/ggml-rpc 2>/dev/null | head -n 1)
[ -n "$RPC" ] || { echo "check_windows_sources: no patched RPC copy under build/: run scripts/setup.sh" >&2; exit 1; }
posix_only=$(mktemp -d)
trap 'rm -rf "$posix_only"' EXIT
mkdir -p "$posix_only/sys"
for header in dirent.h unistd.h dlfcn.h strings.h sys/mman.h sys/syscall.h; do
  echo "#error \"<$header> is POSIX: MSVC has none\"" >"$posix_only/$header"
done
includes=(-I"$posix_only" -I"$RPC/ggml/include" -I"$TREE/src" -I"$TREE/common" -I"$TREE/vendor" -I"$TREE/include"
          -I"$TREE/ggml/include" -I"$TREE/ggml/src")
status=0
for source in csrc/*.cpp "$RPC/ggml/src/ggml-rpc/ggml-rpc.cpp" "$RPC/ggml/src/ggml-rpc/transport.cpp"; do
  case "$source" in csrc/bindings*.cpp) continue ;; esac
  if ! "$CXX" -fsyntax-only -std=gnu++17 -DGGML_SHARED -DLLAMA_SHARED "${includes[@]}" "$source" 2>"$posix_only/errors.txt"; then
    echo "check_windows_sources: $source does not compile for Windows:" >&2
    grep -m 10 "error" "$posix_only/errors.txt" >&2
    status=1
  fi
done
[ $status = 0 ] && echo "check_windows_sources: every engine source and the RPC client compile for Windows (MinGW-w64)"
exit $status
