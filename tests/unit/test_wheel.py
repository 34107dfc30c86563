"""The wheel ships what users run: the package's tracked files, the extension and the shipped MTP head; no test
model, test helper or lab module."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_HEAD = "mtp_llm/models/smollm2-135m-mtp-head.gguf"


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The file list of a wheel built from this tree, reusing the persistent build directory (seconds when the
    extension is built already)."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-build-isolation",
         "--no-deps", "-w", str(out), str(ROOT)],
        check=True, capture_output=True, timeout=900,
    )
    (wheel,) = out.glob("mtp_llm-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def tracked_package_files() -> set[str]:
    listed = subprocess.run(["git", "ls-files", "mtp_llm"], cwd=ROOT, check=True, capture_output=True, text=True)
    return set(listed.stdout.split())


def built_libraries() -> set[str]:
    """What a build with run-time CPU variants puts beside the extension: llama.cpp's shared libraries under the
    package's own names and one CPU backend per variant built (the wheel is built as the installed package was)."""
    from mtp_llm import cpu_backend

    variants = cpu_backend().built
    if not variants:
        return set()
    shared = {f"mtp_llm/libmtp_{name}.so" for name in ("ggml-base", "ggml", "llama", "llama-common")}
    return shared | {f"mtp_llm/libggml-cpu-{variant}.so" for variant in variants}


def test_the_wheel_holds_the_tracked_package_the_extension_and_the_cpu_variants(wheel_files: list[str]) -> None:
    package = {name for name in wheel_files if not name.startswith("mtp_llm-")}
    extension = {name for name in package if name.startswith("mtp_llm/_core.") and name.endswith((".so", ".pyd"))}
    assert len(extension) == 1, extension
    assert package - extension == tracked_package_files() | built_libraries()
    assert all(name.startswith("mtp_llm-0.1.0.dist-info/") for name in wheel_files if name.startswith("mtp_llm-"))


def test_the_only_model_in_the_wheel_is_the_shipped_head(wheel_files: list[str]) -> None:
    assert [name for name in wheel_files if name.endswith(".gguf")] == [SHIPPED_HEAD]
    assert not [name for name in wheel_files if name.endswith((".npz", ".safetensors", ".bin", ".pt"))]


def test_lab_modules_and_test_helpers_stay_out(wheel_files: list[str]) -> None:
    assert not {"mtp_llm/gguf/fuzz.py", "mtp_llm/bench/draft_trace.py"} & set(wheel_files)
    assert not [name for name in wheel_files if name.startswith("tests/") or "/tests/" in name]
