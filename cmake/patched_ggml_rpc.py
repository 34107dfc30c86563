"""Write a patched copy of ggml's RPC backend sources into a build directory and print it.

ggml's RPC client aborts the process when a connection fails, and waits forever on a server
that stops answering. The extension compiles its own copy of ``ggml/src/ggml-rpc`` (and
``ggml-rpc.h``) with ``patches/ggml-rpc/0001-rpc-client-no-abort.patch`` and
``0002-rpc-client-gives-up.patch`` applied, instead of turning on
``GGML_RPC`` in the shared llama.cpp build: the cached llama.cpp tree and its build
directory stay exactly as they are (no rebuild, no new build key).

Usage: python patched_ggml_rpc.py LLAMA_CPP_DIR OUT_DIR
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

from fetch_llama_cpp import apply_patch_files  # this script's folder is first on sys.path

PATCH_DIR = Path(__file__).resolve().parent.parent / "patches" / "ggml-rpc"
PATCHES = {  # applied in this order, each checked against its sha256
    "0001-rpc-client-no-abort.patch": "840ad1c54ebd182250e53b9c001884cc313debec0eb2e3a810df96a12e1d53e5",
    "0002-rpc-client-gives-up.patch": "a0010f1e2d5e93e8928bf6ae31f7edb707d8e3ef4bba33c8992bdfe2641b7352",
}
FILES = (
    "ggml/include/ggml-rpc.h",
    "ggml/src/ggml-rpc/ggml-rpc.cpp",
    "ggml/src/ggml-rpc/transport.cpp",
    "ggml/src/ggml-rpc/transport.h",
)
STAMP = ".mtp_llm_rpc_patch"


def main(tree: Path, out: Path) -> Path:
    for name, expected in PATCHES.items():
        digest = hashlib.sha256((PATCH_DIR / name).read_bytes()).hexdigest()
        if digest != expected:
            raise SystemExit(f"{name} has sha256 {digest}, expected {expected}: update PATCHES")
    stamp = f"{tree.resolve()} {' '.join(PATCHES.values())}\n"
    if (out / STAMP).exists() and (out / STAMP).read_text() == stamp:
        return out
    if out.exists():
        shutil.rmtree(out)
    for name in FILES:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tree / name, out / name)
    apply_patch_files(out, [PATCH_DIR / name for name in PATCHES])
    (out / STAMP).write_text(stamp)
    return out


if __name__ == "__main__":
    print(main(Path(sys.argv[1]), Path(sys.argv[2])))
