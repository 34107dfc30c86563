"""Fetch the pinned llama.cpp source tree and print its path.

llama.cpp is taken from the llama-cpp-python sdist (its ``vendor/llama.cpp``),
checked against a pinned sha256 and unpacked once into a cache directory outside
the source tree. The pristine tree comes from, in this order:

1. the sdist already in the cache (the whole ``vendor/llama.cpp``);
2. the vendored tree ``third_party/llama.cpp-<version>-<sha>/`` of this source tree
   (an mtp_llm sdist ships it): only what the build reads, each file checked
   against the tree's ``SHA256SUMS``; no download;
3. a download with pip from the configured package index, unless
   ``MTP_LLM_OFFLINE=1`` forbids it.

The patches in ``patches/llama.cpp/`` (listed, with their sha256, in ``PATCHES``)
are applied to that tree; a stamp file records which, so a changed patch set
unpacks a pristine tree again. A user's own tree (MTP_LLM_LLAMA_CPP_DIR) is never
patched.

Usage: python fetch_llama_cpp.py [CACHE_DIR]
       python fetch_llama_cpp.py --vendor DIR   (write the pristine build subset and
                                                its SHA256SUMS to DIR/llama.cpp-<version>-<sha>/)
Environment: MTP_LLM_CACHE_DIR overrides the cache location; MTP_LLM_OFFLINE=1
forbids the download.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

SDIST_NAME = "llama-cpp-python"
SDIST_VERSION = "0.3.36"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
VENDOR_PREFIX = f"llama_cpp_python-{SDIST_VERSION}/vendor/llama.cpp/"
TREE_NAME = f"llama.cpp-{SDIST_VERSION}-{SDIST_SHA256[:12]}"

ROOT = Path(__file__).resolve().parent.parent
# The vendored pristine tree of an sdist (scripts/build_sdist.sh writes it; .gitignored in a clone).
VENDORED_DIR = ROOT / "third_party"
MANIFEST = "SHA256SUMS"
# What the build reads of the tree: llama.cpp's top CMakeLists.txt adds ggml, src, vendor and common
# (tests, tools, examples, pocs and app are off), includes cmake/ and embeds LICENSE; licenses/ holds
# the licence of a vendored library.
VENDOR_FILES = ("CMakeLists.txt", "LICENSE")
VENDOR_DIRS = ("cmake", "include", "src", "common", "ggml", "vendor", "licenses")
# The sha256 of that subset's SHA256SUMS: a vendored tree is exactly this part of the pinned sdist.
VENDOR_MANIFEST_SHA256 = "06292f706e3bbf87999a43a436aad80e231b0b962c69094cd60ee77a07f4af64"

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
    "0021-cpu-variant-subset.patch": "8ad8a5d707cbe25f33c4f718853fcd0bf6fdc2b6c0fba7312ad53abe50567a4f",
    "0022-avx-only-exact-columns.patch": "33b04d5c5df89e2626bab5c5ecb00d25f9434d4b3e4b9c7b9ded6874e3d98d10",
    "0023-arm-exact-wide-verify.patch": "2592a3812f48fc3ec0ad9b978460d019464aa2e6181146a39af436d0d4edb303",
    "0024-jinja-render-limits.patch": "e473bdb2ab971f50408c06bca82889b4861ed5c8b0c624fc7b1d77be1f20d3e1",
    "0025-mtp-draft-pick-hook.patch": "392bd1683168497c0eb99b263ceab8c217d2fe330b02f0f5cfc3ea9d9baaa93b",
    "0026-avx2-small-batch-exact.patch": "d52418eb63ab4f06de98d3ee565f5d4c0505dd53298db9b5edbc60701b96b9fd",
    "0027-avx2-avx512-round-alike.patch": "cd89c88a669a33dcbc4d7ff5031e19d54b67749d8a3e596bbbf6e1f6f175f00e",
    "0028-one-column-small-batch.patch": "d4a14316a149aa891d6e1d7640d0ae008a0a1cae8d36af6c4ba8bb0148527766",
    "0029-arm-avx2-round-alike.patch": "feab7f7785d2c7d2dc23246f1d7a89ddf562c8f8ccaa41d521483dc700707e02",
    "0030-fma-without-avx2-round-alike.patch": "9d2ce3f2540a76546b2425d7aed066c0e04e6cd4a3b054796a3e245edc76b3af",
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


def offline() -> bool:
    """MTP_LLM_OFFLINE=1 (or true, yes, on) forbids the download."""
    return os.environ.get("MTP_LLM_OFFLINE", "").strip().lower() not in ("", "0", "false", "no", "off")


def cached_sdist(dest: Path) -> Path | None:
    """The pinned sdist in the cache directory `dest`, when it is there with the pinned sha256."""
    archive = dest / f"llama_cpp_python-{SDIST_VERSION}.tar.gz"
    if archive.exists() and sha256_of(archive) == SDIST_SHA256:
        return archive
    return None


def download_sdist(dest: Path) -> Path:
    archive = cached_sdist(dest)
    if archive is not None:
        return archive
    if offline():
        raise SystemExit(
            f"MTP_LLM_OFFLINE is set and llama.cpp's source is not here: {ROOT} has no "
            f"third_party/{TREE_NAME}/ (an mtp_llm sdist ships it) and {dest} has no "
            f"llama_cpp_python-{SDIST_VERSION}.tar.gz (sha256 {SDIST_SHA256}). Install from an "
            f"mtp_llm sdist, run `python cmake/fetch_llama_cpp.py` once with network access (or copy "
            f"that file into {dest}), or set MTP_LLM_LLAMA_CPP_DIR to a patched llama.cpp tree."
        )
    dest.mkdir(parents=True, exist_ok=True)
    archive = dest / f"llama_cpp_python-{SDIST_VERSION}.tar.gz"
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


def in_vendor_subset(name: str) -> bool:
    """Whether `name` (relative to llama.cpp's root, POSIX) is part of what the build reads."""
    top, _, rest = name.partition("/")
    return (top in VENDOR_FILES and not rest) or (top in VENDOR_DIRS and bool(rest))


def fresh_dir(target: Path) -> Path:
    """An empty ``<target>.partial`` beside `target`: filled, then renamed into place."""
    partial = target.with_name(target.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    return partial


def replace_dir(partial: Path, target: Path) -> None:
    if target.exists():
        shutil.rmtree(target)
    partial.rename(target)


def unpack_vendor_tree(archive: Path, target: Path, subset: bool = False) -> None:
    """Unpack the sdist's ``vendor/llama.cpp`` into `target`: all of it, or (`subset`) what the build
    reads, with its SHA256SUMS."""
    partial = fresh_dir(target)
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            if not member.name.startswith(VENDOR_PREFIX):
                continue
            member.name = member.name[len(VENDOR_PREFIX):]
            if member.name and (not subset or in_vendor_subset(member.name)):
                tar.extract(member, partial, filter="data")
    if subset:
        manifest = manifest_of(partial)
        digest = hashlib.sha256(manifest.encode()).hexdigest()
        if digest != VENDOR_MANIFEST_SHA256:
            raise SystemExit(
                f"the build subset's {MANIFEST} has sha256 {digest}, expected {VENDOR_MANIFEST_SHA256}: "
                f"update VENDOR_MANIFEST_SHA256 after changing VENDOR_FILES or VENDOR_DIRS"
            )
        (partial / MANIFEST).write_text(manifest)
    replace_dir(partial, target)


def tree_files(tree: Path) -> list[str]:
    """Every file and symlink below `tree` (POSIX paths relative to it), sorted, the manifest left out."""
    names = []
    for dirpath, _, filenames in os.walk(tree):
        for filename in filenames:
            names.append((Path(dirpath) / filename).relative_to(tree).as_posix())
    return sorted(name for name in names if name != MANIFEST)


def manifest_of(tree: Path) -> str:
    """``sha256sum``'s format: one ``<sha256>  <path>`` line per file, sorted by path."""
    return "".join(f"{sha256_of(tree / name)}  {name}\n" for name in tree_files(tree))


def write_vendor_tree(out_dir: Path, cache_dir: Path) -> Path:
    """Write the pristine build subset of the pinned tree and its SHA256SUMS to ``out_dir/TREE_NAME``."""
    target = out_dir / TREE_NAME
    out_dir.mkdir(parents=True, exist_ok=True)
    unpack_vendor_tree(download_sdist(cache_dir), target, subset=True)
    return target


def verify_vendored_tree(tree: Path) -> None:
    """Check every file of a vendored tree against its SHA256SUMS; no file missing, none unlisted."""
    manifest = tree / MANIFEST
    advice = (
        f"Unpack the mtp_llm sdist again, or delete {tree} to have the pinned llama-cpp-python "
        f"sdist downloaded instead."
    )
    if not manifest.is_file():
        raise SystemExit(f"the vendored llama.cpp tree {tree} has no {MANIFEST}. {advice}")
    digest = sha256_of(manifest)
    if digest != VENDOR_MANIFEST_SHA256:
        raise SystemExit(
            f"{manifest} has sha256 {digest}, expected {VENDOR_MANIFEST_SHA256} (the build subset of "
            f"llama-cpp-python {SDIST_VERSION}). {advice}"
        )
    expected: dict[str, str] = {}
    for number, line in enumerate(manifest.read_text().splitlines(), 1):
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64 or not name:
            raise SystemExit(f"{manifest}, line {number}: not '<sha256>  <path>'. {advice}")
        expected[name] = digest
    present = set(tree_files(tree))
    problems = [f"{name}: missing" for name in sorted(expected.keys() - present)]
    problems += [f"{name}: not listed in {MANIFEST}" for name in sorted(present - expected.keys())]
    for name in sorted(expected.keys() & present):
        path = tree / name
        if path.is_symlink() or not path.is_file():
            problems.append(f"{name}: not a regular file")
            continue
        digest = sha256_of(path)
        if digest != expected[name]:
            problems.append(f"{name}: sha256 {digest}, expected {expected[name]}")
    if problems:
        shown = "\n  ".join(problems[:10])
        more = f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else ""
        raise SystemExit(
            f"the vendored llama.cpp tree {tree} does not match its {MANIFEST} "
            f"({len(problems)} problem(s)):\n  {shown}{more}\n{advice}"
        )


def copy_vendored_tree(tree: Path, target: Path) -> None:
    """Copy a verified vendored tree (its manifest left out) to `target`."""
    partial = fresh_dir(target)
    for name in tree_files(tree):
        (partial / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(tree / name, partial / name)
    replace_dir(partial, target)


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


def ensure_llama_cpp(cache_dir: Path, vendored_dir: Path = VENDORED_DIR) -> Path:
    target = cache_dir / TREE_NAME
    stamp = patch_stamp()
    stamp_file = target / STAMP
    applied = stamp_file.read_text() if stamp_file.exists() else ""
    if (target / "include" / "llama.h").exists() and applied == stamp:
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    # The sdist in the cache first: the whole tree (the tests read its chat templates and converter).
    archive = cached_sdist(cache_dir)
    vendored = vendored_dir / TREE_NAME
    # A tree with another patch set is replaced by a pristine one at the same path, so the
    # compiler cache still serves every unchanged file.
    if archive is None and vendored.is_dir():
        verify_vendored_tree(vendored)
        print(f"mtp_llm: llama.cpp from the vendored tree {vendored}", file=sys.stderr)
        copy_vendored_tree(vendored, target)
    else:
        unpack_vendor_tree(archive or download_sdist(cache_dir), target)
    apply_patches(target)
    stamp_file.write_text(stamp)
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("cache_dir", nargs="?", type=Path, help="default: $MTP_LLM_CACHE_DIR, else <cache>/mtp_llm")
    parser.add_argument("--vendor", type=Path, metavar="DIR",
                        help=f"write the pristine build subset and its {MANIFEST} to DIR/{TREE_NAME}/")
    args = parser.parse_args(argv)
    cache = args.cache_dir or default_cache_dir()
    print(write_vendor_tree(args.vendor, cache) if args.vendor else ensure_llama_cpp(cache))


if __name__ == "__main__":
    main()
