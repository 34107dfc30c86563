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
    "0001-small-batch-matmul.patch": "5c55446fb6fe6f4f18eae6417f8c044d839b2d4aa9c0ef85315aecea31035cc5",
    "0002-repack-padded-gemm.patch": "59e18fc4cfe76cd4e6b720a921f5b444973d1cff634cc0165f3ce65470cdf432",
    "0003-prefetch-next-rows.patch": "73faf8e872b701c57226b77355d83ce358e7748e76e17046ce22aa1714767d6b",
    "0004-prefetch-one-row-path.patch": "f15f3b78626e4a9733e0a50b39f69dedec9081cc1436cfe5008a676119376221",
    "0005-llama-mtp-graph.patch": "593486e38fa68e9ac923bf7e6f50ef0b6f54056159f82295bbdf6d37c8b5f5e9",
    "0006-grammar-forced-text.patch": "14cfb5a82efe869a52913030a21693b48768a1c251ae6159863078ea6816f44e",
    "0007-mtp-draft-vocab.patch": "060ed55cac7c045e157fa93a757be5cd5572d574c4d5f7a798eea4e704bc8e6e",
    "0009-small-batch-exact.patch": "ad71d1c59479a65d02e7a3331d51919c8c46f596dbe41f65ed62d2f41f0d79c4",
    "0010-small-batch-f32-exact.patch": "5a7b45918a5f3dab1cd1f71c0912189a1f18d3a9e015144354e90950ffa503b1",
    "0011-grammar-clone.patch": "0d02e1ca6f4ccd61ea7a8b86c95545e54a9c05fb494af495001d9d6d22120d25",
    "0012-flash-attn-row-invariant.patch": "f1e29a2884bb6f9dc46c465f6e67cba4ae29bb23e69925f93aee78dc1ade38ef",
    "0013-small-batch-f32-every-cpu.patch": "e8e6111ec7ef87bc446a41724fe4c106b509163efa746e34375f8e12c6cbda7e",
    "0014-thread-safe-localtime.patch": "287608ff3d35f537f5340c7d091c57c46e17a8ac1bd59e903692db29272ba4cd",
    "0015-prefetch-f16-amd-only.patch": "c5ee79b5252a937a7f123bc418a0b34139e166785d091fc9214416dec08ffd58",
    "0016-exact-columns-every-cpu.patch": "4ddcb8ee1f6ae0e4468478eb67bad02765dd7bee68418cd2ee4dc6ed9c6894a4",
    "0017-q4-1-verify-fewer-instructions.patch": "156fd1995d4a88d7158a8bf2be31e183fec87553b41a05fb323962d5735a76ed",
    "0018-small-batch-grouped-columns.patch": "b3cd3163f6dd1817d4d0ec16ec086e045827a31f19b0c4e025cb64f292c2e83c",
    "0019-greedy-grammar-resample.patch": "3e17d00973bfad5959522c9b84a746311becb134402ee9bd4bfd98766017fc7b",
    "0020-flash-attn-blocked-rows.patch": "df7be12d3e378778dc0c9b72f27531ce82c10542f7ef0014f1c52bba6a53c070",
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
