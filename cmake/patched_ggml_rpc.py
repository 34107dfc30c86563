"""Write a patched copy of ggml's RPC backend sources into a build directory and print it.

ggml's RPC client aborts the process when a connection fails. The extension compiles
its own copy of ``ggml/src/ggml-rpc`` (and ``ggml-rpc.h``) with
``patches/ggml-rpc/0001-rpc-client-no-abort.patch`` applied, instead of turning on
``GGML_RPC`` in the shared llama.cpp build: the cached llama.cpp tree and its build
directory stay exactly as they are (no rebuild, no new build key).

Usage: python patched_ggml_rpc.py LLAMA_CPP_DIR OUT_DIR
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

PATCH = Path(__file__).resolve().parent.parent / "patches" / "ggml-rpc" / "0001-rpc-client-no-abort.patch"
PATCH_SHA256 = "5ea6081c5159bf89d8564dd5025779c741d97c1f16bd4f9f85ebd952c1db7450"
FILES = (
    "ggml/include/ggml-rpc.h",
    "ggml/src/ggml-rpc/ggml-rpc.cpp",
    "ggml/src/ggml-rpc/transport.cpp",
    "ggml/src/ggml-rpc/transport.h",
)
STAMP = ".mtp_llm_rpc_patch"


def main(tree: Path, out: Path) -> Path:
    digest = hashlib.sha256(PATCH.read_bytes()).hexdigest()
    if digest != PATCH_SHA256:
        raise SystemExit(f"{PATCH.name} has sha256 {digest}, expected {PATCH_SHA256}: update PATCH_SHA256")
    stamp = f"{tree.resolve()} {digest}\n"
    if (out / STAMP).exists() and (out / STAMP).read_text() == stamp:
        return out
    if out.exists():
        shutil.rmtree(out)
    for name in FILES:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tree / name, out / name)
    if shutil.which("patch"):
        cmd = ["patch", "-p1", "--forward", "--batch", "--silent", "-i", str(PATCH)]
    else:
        cmd = ["git", "--git-dir=/nonexistent", "apply", "-p1", "--whitespace=nowarn", str(PATCH)]
    subprocess.run(cmd, cwd=out, check=True, stdout=sys.stderr)
    (out / STAMP).write_text(stamp)
    return out


if __name__ == "__main__":
    print(main(Path(sys.argv[1]), Path(sys.argv[2])))
