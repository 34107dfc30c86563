"""The sdist builds offline: it ships the pristine part of the pinned llama.cpp that the build reads
(``third_party/``, every file checked against its SHA256SUMS before use), and no test model or build output.
Nothing is compiled: the vendor step reads the pinned llama-cpp-python sdist that scripts/setup.sh cached."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_HEAD = "mtp_llm/models/smollm2-135m-mtp-head.gguf"


def _load_fetch() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fetch_llama_cpp_under_test", ROOT / "cmake" / "fetch_llama_cpp.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fetch = _load_fetch()
TREE = fetch.TREE_NAME


@pytest.fixture(scope="module")
def vendored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``third_party/`` as scripts/build_sdist.sh writes it: the CLI's vendor step, offline, from the cached sdist."""
    cache = fetch.default_cache_dir()
    assert fetch.cached_sdist(cache) is not None, f"no pinned llama-cpp-python sdist in {cache}: run scripts/setup.sh"
    out = tmp_path_factory.mktemp("vendor") / "third_party"
    done = subprocess.run(
        [sys.executable, str(ROOT / "cmake" / "fetch_llama_cpp.py"), "--vendor", str(out)],
        env={**os.environ, "MTP_LLM_OFFLINE": "1"}, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out / TREE)
    return out


def _manifest(tree: Path) -> dict[str, str]:
    lines = (tree / fetch.MANIFEST).read_text().splitlines()
    return {name: digest for digest, _, name in (line.partition("  ") for line in lines)}


def test_the_vendor_step_writes_the_build_subset_and_its_sums(vendored: Path) -> None:
    tree = vendored / TREE
    assert [p.name for p in vendored.iterdir()] == [TREE]
    assert {p.name for p in tree.iterdir()} == {*fetch.VENDOR_FILES, *fetch.VENDOR_DIRS, fetch.MANIFEST}
    assert (tree / "include" / "llama.h").is_file() and (tree / "ggml" / "src" / "ggml-cpu" / "ops.cpp").is_file()
    listed = _manifest(tree)
    assert sorted(listed) == fetch.tree_files(tree) and len(listed) > 1000
    assert fetch.sha256_of(tree / fetch.MANIFEST) == fetch.VENDOR_MANIFEST_SHA256
    fetch.verify_vendored_tree(tree)


def test_every_patch_applies_to_the_subset(vendored: Path) -> None:
    """The patches touch only files of the subset (a patch on tools/ or tests/ would fail the sdist's build)."""
    listed = _manifest(vendored / TREE)
    for name in [*fetch.PATCHES, *(p.name for p in (ROOT / "patches" / "ggml-rpc").glob("*.patch"))]:
        path = ROOT / "patches" / ("llama.cpp" if name in fetch.PATCHES else "ggml-rpc") / name
        targets = {line[len("+++ b/"):].split("\t")[0] for line in path.read_text().splitlines()
                   if line.startswith("+++ b/")}
        assert targets, name
        # a file a patch creates is not in the pristine tree, but its folder is
        missing = {t for t in targets if t not in listed and not any(n.startswith(t.rsplit("/", 1)[0] + "/")
                                                                    for n in listed)}
        assert not missing, f"{name} patches files outside the vendored subset: {sorted(missing)}"


def test_the_vendored_tree_gives_the_same_patched_tree_offline(
    vendored: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MTP_LLM_OFFLINE", "1")
    from_vendored = fetch.ensure_llama_cpp(tmp_path / "cache", vendored_dir=vendored)
    assert from_vendored == tmp_path / "cache" / TREE
    assert (from_vendored / fetch.STAMP).read_text() == fetch.patch_stamp()
    assert not (from_vendored / fetch.MANIFEST).exists()
    # The same tree the cached llama-cpp-python sdist gives (with its extra folders: models, tools, ...).
    archive_cache = tmp_path / "archive-cache"
    archive_cache.mkdir()
    (archive_cache / fetch.cached_sdist(fetch.default_cache_dir()).name).symlink_to(
        fetch.cached_sdist(fetch.default_cache_dir()))
    from_archive = fetch.ensure_llama_cpp(archive_cache, vendored_dir=tmp_path / "none")
    names = fetch.tree_files(from_vendored)
    assert set(names) <= set(fetch.tree_files(from_archive))
    different = [n for n in names if (from_vendored / n).read_bytes() != (from_archive / n).read_bytes()]
    assert not different


@pytest.mark.parametrize("change", ["edited", "missing", "unlisted", "manifest-edited-too"])
def test_a_tampered_vendored_tree_is_refused(
    vendored: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    monkeypatch.setenv("MTP_LLM_OFFLINE", "1")
    copy = tmp_path / "third_party"
    shutil.copytree(vendored, copy)
    tree = copy / TREE
    victim = tree / "ggml" / "src" / "ggml-cpu" / "ops.cpp"
    if change == "missing":
        victim.unlink()
    elif change == "unlisted":
        (tree / "src" / "extra.cpp").write_text("int extra;\n")
    else:
        victim.write_bytes(victim.read_bytes() + b"\n// changed\n")
        if change == "manifest-edited-too":
            sums = tree / fetch.MANIFEST
            digest = fetch.sha256_of(victim)
            sums.write_text("".join(
                f"{digest}  {name}\n" if name == "ggml/src/ggml-cpu/ops.cpp" else f"{old}  {name}\n"
                for name, old in _manifest(tree).items()))
    cache = tmp_path / "cache"
    with pytest.raises(SystemExit) as refused:
        fetch.ensure_llama_cpp(cache, vendored_dir=copy)
    message = str(refused.value.code)
    assert str(tree) in message and "sdist" in message, message
    expected = {
        "edited": ["does not match its SHA256SUMS", "ggml/src/ggml-cpu/ops.cpp: sha256 "],
        "missing": ["does not match its SHA256SUMS", "ggml/src/ggml-cpu/ops.cpp: missing"],
        "unlisted": ["does not match its SHA256SUMS", "src/extra.cpp: not listed in SHA256SUMS"],
        "manifest-edited-too": ["SHA256SUMS has sha256", fetch.VENDOR_MANIFEST_SHA256],
    }[change]
    assert all(part in message for part in expected), message
    assert not (cache / TREE).exists()


def test_offline_with_no_source_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MTP_LLM_OFFLINE", "1")
    with pytest.raises(SystemExit) as refused:
        fetch.ensure_llama_cpp(tmp_path / "cache", vendored_dir=tmp_path / "third_party")
    message = str(refused.value.code)
    assert "MTP_LLM_OFFLINE" in message and "mtp_llm sdist" in message and "MTP_LLM_LLAMA_CPP_DIR" in message


@pytest.fixture(scope="module")
def sdist_files(vendored: Path, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The file list of an sdist made (scikit-build-core's hook, no compile) from a copy of this checkout's files
    (tracked, and untracked but not ignored), the vendored tree, and decoys that must stay out."""
    src = tmp_path_factory.mktemp("src") / "mtp_llm"
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    shutil.copytree(vendored, src / "third_party")
    for decoy in ["tests/.models/decoy.gguf", ".venv/lib/decoy.py", ".venv-wheel/decoy.py", "build/decoy.o",
                  "dist/mtp_llm-0.0.0.tar.gz", "third_party/llama.cpp-0.0.0-000000000000/CMakeLists.txt"]:
        (src / decoy).parent.mkdir(parents=True, exist_ok=True)
        (src / decoy).write_text("decoy\n")
    out = src.parent / "dist"
    subprocess.run([sys.executable, "-c", "import sys; from scikit_build_core.build import build_sdist; "
                    "print(build_sdist(sys.argv[1]))", str(out)],
                   cwd=src, check=True, capture_output=True, timeout=120)
    (sdist,) = out.glob("mtp_llm-*.tar.gz")
    with tarfile.open(sdist) as archive:
        members = archive.getmembers()
        assert all(m.isfile() for m in members), [m.name for m in members if not m.isfile()]
        prefix = f"{sdist.name[:-len('.tar.gz')]}/"
        assert all(m.name.startswith(prefix) for m in members)
        archive.extractall(out / "unpacked", filter="data")
    # The vendored tree survives the round trip byte for byte.
    fetch.verify_vendored_tree(out / "unpacked" / prefix / "third_party" / TREE)
    return [m.name[len(prefix):] for m in members]


def test_the_sdist_holds_the_vendored_tree_and_the_build_inputs(vendored: Path, sdist_files: list[str]) -> None:
    files = set(sdist_files)
    vendored_files = {n for n in files if n.startswith("third_party/")}
    assert vendored_files == {f"third_party/{TREE}/{n}" for n in [*_manifest(vendored / TREE), fetch.MANIFEST]}
    tracked = subprocess.run(["git", "ls-files", "CMakeLists.txt", "pyproject.toml", "cmake", "csrc", "mtp_llm",
                              "patches"], cwd=ROOT, check=True, capture_output=True, text=True).stdout.split()
    assert set(tracked) <= files
    assert {f"patches/llama.cpp/{name}" for name in fetch.PATCHES} <= files
    assert {"PKG-INFO", SHIPPED_HEAD} <= files


def test_no_test_model_or_build_output_in_the_sdist(sdist_files: list[str]) -> None:
    assert [n for n in sdist_files if n.endswith(".gguf")] == [SHIPPED_HEAD]
    assert not [n for n in sdist_files if n.endswith((".npz", ".safetensors", ".bin", ".pt", ".so", ".o"))]
    stale_tree = "third_party/llama.cpp-0.0.0"
    for folder in ("tests/models/", "tests/.models/", ".venv/", ".venv-", "build/", "dist/", stale_tree):
        assert not [n for n in sdist_files if n.startswith(folder)], folder
