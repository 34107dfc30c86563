"""Fetch the pinned llama.cpp source tree and print its path.

llama.cpp is taken from the llama-cpp-python sdist (its ``vendor/llama.cpp``),
downloaded with pip from the configured package index, checked against a pinned
sha256 and unpacked once into a cache directory outside the source tree. The
patches in ``patches/llama.cpp/`` (listed, with their sha256, in ``PATCHES``) are
applied to that tree; a stamp file records which, so a changed patch set unpacks
a pristine tree again. A user's own tree (MTP_LLM_LLAMA_CPP_DIR) is never patched.

Usage: python fetch_llama_cpp.py [CACHE_DIR]
Environment: MTP_LLM_CACHE_DIR overrides the cache location.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

SDIST_NAME = "llama-cpp-python"
SDIST_VERSION = "0.3.36"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
VENDOR_PREFIX = f"llama_cpp_python-{SDIST_VERSION}/vendor/llama.cpp/"

PATCH_DIR = Path(__file__).resolve().parent.parent / "patches" / "llama.cpp"
# Applied in this order; each file must have this sha256 (see patches/README.md).
PATCHES: dict[str, str] = {
    "0001-small-batch-matmul.patch": "573e660dbaae50cd214a5af45595ba1070b6294fc5302af2866187738e75a025",
    "0002-repack-padded-gemm.patch": "f590dc44982e63e02b7732ebbe8ffe2b7ef2db26b4ba0de9a3e3c6240c122eb6",
    "0003-prefetch-next-rows.patch": "2c5cd9245ba709d1e84c92fe7e86fd6fc9beec0078c67ca5b0d8ceae9be806c5",
    "0004-prefetch-one-row-path.patch": "5ec851e2c20db2eba490f6cb3dcc69fcef99e434f1f8e9243e50373154184436",
    "0005-llama-mtp-graph.patch": "310801216b44cb05602a2ce2e2879483162cee9a90166f62acb066b705907387",
    "0006-grammar-forced-text.patch": "5576eabde6e58dee0f8e442aeddf83377f60c396ce20d4ad16bfc3cfb02259d6",
    "0007-mtp-draft-vocab.patch": "c978b3dc99642e0d8e366477f58a434ef104ba44a56489d83f9403de269de8ac",
    "0009-small-batch-exact.patch": "706d3f39318abd8c57f8a9058a37cd63f9433846c6b6fdb5791fde101f9e056c",
    "0010-small-batch-f32-exact.patch": "933116ad17d75ec32b7a092b779ffdcaaacd2ab47a33dc513598d263509abaae",
    "0011-grammar-clone.patch": "a3bf3b373c2a86ef9cf5098bffed3ebbc188f2749ec16c15f4c89b3114f68502",
    "0012-flash-attn-row-invariant.patch": "74e5a4dd4b0a43350261f5d765d6c903ac48e97ca5b72ede12d92956b18f5ef2",
    "0013-small-batch-f32-every-cpu.patch": "85d7874b53c512ec259d2adfe0e2643ee9bc755df146ab0d09e95b9a2af8fb59",
    "0014-thread-safe-localtime.patch": "f32602e845ab1a19c42acbca619bcc867b7febcf5801e254c5ec3964ef5297b6",
    "0015-prefetch-f16-amd-only.patch": "05db9c10b1a13e48de4c2b634c61b24f0a6a36567b427f3f0d44b568830bd89b",
    "0016-exact-columns-every-cpu.patch": "b9bd85df6196fed707570f346119ec6fc35b45267151f556093fcce61cee9cff",
    "0017-q4-1-verify-fewer-instructions.patch": "64ebc66536168fdf10b7eb79550e0023fc9b81d5cc869b7dba73ffddd7749716",
    "0018-small-batch-grouped-columns.patch": "f1824918a4f4210dc63272ef30c85b044c8cd4dc2ebc1a001b0be6ec9be4d62a",
    "0019-greedy-grammar-resample.patch": "8c24bff22c7d909ad78a12a1bf6115640abed358a7d1a6e6fd624b94e1bf1777",
    "0020-flash-attn-blocked-rows.patch": "1552f74fbd2e8af4436994b35e011ba3b56e26f4641bac4dee05ecd7e25c6935",
}
STAMP = ".mtp_llm_patches"


def default_cache_dir() -> Path:
    env = os.environ.get("MTP_LLM_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "mtp_llm"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download_sdist(dest: Path) -> Path:
    archive = dest / f"llama_cpp_python-{SDIST_VERSION}.tar.gz"
    if archive.exists() and sha256_of(archive) == SDIST_SHA256:
        return archive
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        # --no-build-isolation: only the metadata step runs, with no build
        # dependencies compiled from source.
        cmd = [
            sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
            "--no-binary", SDIST_NAME, "--no-build-isolation",
            f"{SDIST_NAME}=={SDIST_VERSION}", "-d", tmp,
        ]
        subprocess.run(cmd, check=True, stdout=sys.stderr)
        (downloaded,) = Path(tmp).glob("*.tar.gz")
        digest = sha256_of(downloaded)
        if digest != SDIST_SHA256:
            raise SystemExit(
                f"sha256 mismatch for {downloaded.name}: got {digest}, expected {SDIST_SHA256}"
            )
        downloaded.replace(archive)
    return archive


def unpack_vendor_tree(archive: Path, target: Path) -> None:
    partial = target.with_name(target.name + ".partial")
    if partial.exists():
        import shutil

        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            if not member.name.startswith(VENDOR_PREFIX):
                continue
            member.name = member.name[len(VENDOR_PREFIX):]
            if member.name:
                tar.extract(member, partial, filter="data")
    partial.rename(target)


def patch_stamp() -> str:
    """One line per patch: name and sha256 (checked against PATCHES)."""
    lines = []
    for name, expected in PATCHES.items():
        digest = sha256_of(PATCH_DIR / name)
        if digest != expected:
            raise SystemExit(f"patch {name} has sha256 {digest}, expected {expected}: update PATCHES")
        lines.append(f"{name} {digest}\n")
    return "".join(lines)


def apply_patches(tree: Path) -> None:
    apply_patch_files(tree, [PATCH_DIR / name for name in PATCHES])


def apply_patch_files(tree: Path, patches: list[Path]) -> None:
    """Apply `patches` in order with `-p1` from `tree`'s root (also cmake/patched_ggml_rpc.py's)."""
    import shutil

    for path in patches:
        patch = str(path)
        if shutil.which("patch"):
            cmd = ["patch", "-p1", "--forward", "--batch", "--silent", "-i", patch]
        else:
            # The sdist's tree holds a stray .git file; keep git from looking for a repository.
            cmd = ["git", "--git-dir=/nonexistent", "apply", "-p1", "--whitespace=nowarn", patch]
        subprocess.run(cmd, cwd=tree, check=True, stdout=sys.stderr)


def ensure_llama_cpp(cache_dir: Path) -> Path:
    target = cache_dir / f"llama.cpp-{SDIST_VERSION}-{SDIST_SHA256[:12]}"
    stamp = patch_stamp()
    stamp_file = target / STAMP
    applied = stamp_file.read_text() if stamp_file.exists() else ""
    if (target / "include" / "llama.h").exists() and applied == stamp:
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    archive = download_sdist(cache_dir)
    if target.exists():
        # Another patch set was applied: start again from the pristine tree (same path,
        # so the compiler cache still serves every unchanged file).
        import shutil

        shutil.rmtree(target)
    unpack_vendor_tree(archive, target)
    apply_patches(target)
    stamp_file.write_text(stamp)
    return target


if __name__ == "__main__":
    cache = Path(sys.argv[1]) if len(sys.argv) > 1 else default_cache_dir()
    print(ensure_llama_cpp(cache))
