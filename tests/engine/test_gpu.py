"""GPU backends: device listing, the MTP head's placement, bad device input, and, on a build
with a GPU device (scripts/check_vulkan.sh: Vulkan on lavapipe), greedy tokens and acceptance
counts identical to the CPU build's with 0, some and all layers offloaded and the head on either device."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mtp_llm import GPUUnavailableWarning, InvalidOptionError, Model, list_backends, list_devices
from mtp_llm.cli import main

from tests.helpers.gpu_cases import MODELS, load, reference, run

GPU = next((d.name for d in list_devices() if d.type in ("gpu", "igpu")), None)
needs_gpu = pytest.mark.skipif(GPU is None, reason="no GPU device in this build (scripts/check_vulkan.sh builds one)")
no_gpu = pytest.mark.skipif(GPU is not None, reason="this build has a GPU device")


@pytest.fixture(scope="module")
def cpu_reference(tiny_paths: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """The CPU build's results (MTP_LLM_GPU_REFERENCE), else this build's with nothing offloaded."""
    path = os.environ.get("MTP_LLM_GPU_REFERENCE")
    if path:
        data: dict[str, dict[str, Any]] = json.loads(Path(path).read_text())
        return data
    return reference(tiny_paths)


def test_devices_and_backends_are_listed() -> None:
    devices = list_devices()
    cpu = [d for d in devices if d.name == "CPU"]
    assert len(cpu) == 1 and cpu[0].type == "cpu" and cpu[0].backend == "CPU"
    assert cpu[0].memory_total > 0 and 0 < cpu[0].memory_free <= cpu[0].memory_total
    assert "CPU" in list_backends()


def test_info_lists_backends_and_devices(tiny_paths: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "--model", str(tiny_paths["random"])]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["backends"] == list_backends()
    assert [d["name"] for d in info["devices"]] == [d.name for d in list_devices()]
    assert {"name", "description", "type", "backend", "memory_free", "memory_total"} <= set(info["devices"][0])


@pytest.mark.parametrize("name", MODELS)
def test_cpu_results_greedy_mtp_equals_plain(cpu_reference: dict[str, dict[str, Any]], name: str) -> None:
    ref = cpu_reference[name]
    assert ref["mtp"] == ref["plain"]
    assert all(len(ids) == 24 for ids in ref["plain"])
    assert ref["drafted"] > 0


def test_acceptance_counts_are_the_forced_models(cpu_reference: dict[str, dict[str, Any]]) -> None:
    # accept100's head always agrees; accept33's agrees on the first token of each draft only.
    counts = {name: (cpu_reference[name]["drafted"], cpu_reference[name]["accepted"]) for name in MODELS}
    assert counts["accept100"] == (36, 36)
    assert counts["accept33"] == (68, 24)
    assert counts["random"] == counts["random-trunk"]  # the same weights, head embedded or in a sidecar


def test_head_placed_on_cpu(tiny_paths: dict[str, Path], cpu_reference: dict[str, dict[str, Any]]) -> None:
    got = run(tiny_paths, "random", 0, "CPU")
    assert got["devices"] == {"target": ["CPU"], "mtp": ["CPU"]}
    assert {k: got[k] for k in ("plain", "mtp", "drafted", "accepted")} == {
        k: cpu_reference["random"][k] for k in ("plain", "mtp", "drafted", "accepted")
    }


def test_unknown_device_lists_the_devices_there_are(tiny_paths: dict[str, Path]) -> None:
    names = ", ".join(["CPU"] + ([GPU] if GPU else []))
    with pytest.raises(InvalidOptionError, match=f"no device named 'CUDA7'.*the devices there are: {names}"):
        Model.load(tiny_paths["random"], mtp_device="CUDA7")


def test_bad_option_types(tiny_paths: dict[str, Path]) -> None:
    with pytest.raises(InvalidOptionError, match="n_gpu_layers must be an int"):
        Model.load(tiny_paths["random"], n_gpu_layers="all")  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match=r"n_gpu_layers must be from -1 \(-1 offloads every layer\)"):
        Model.load(tiny_paths["random"], n_gpu_layers=-2)
    with pytest.raises(InvalidOptionError, match="mtp_device must be a device name"):
        Model.load(tiny_paths["random"], mtp_device=0)  # type: ignore[arg-type]


@no_gpu
def test_n_gpu_layers_without_a_gpu_warns_and_runs_on_the_cpu(tiny_paths: dict[str, Path]) -> None:
    with pytest.warns(GPUUnavailableWarning, match="n_gpu_layers=-1 but this mtp_llm build has no GPU device"):
        model = Model.load(tiny_paths["random"], n_gpu_layers=-1)
    assert model.n_gpu_layers == -1


def expected_devices(n_gpu_layers: int, mtp_device: str | None) -> dict[str, list[str]] | None:
    """Where the tiny models (2 trunk blocks, the head, the output layer) run; None: mixed."""
    assert GPU is not None
    if n_gpu_layers not in (0, -1):
        return None
    on = "CPU" if n_gpu_layers == 0 else GPU
    head = [mtp_device or on]
    if mtp_device == GPU and n_gpu_layers == 0:
        head = ["CPU", GPU]  # weights on the GPU; its KV cache follows its layer (on the CPU)
    return {"target": [on], "mtp": head}


@needs_gpu
@pytest.mark.parametrize("mtp_device", [None, "CPU", "gpu"])
@pytest.mark.parametrize("n_gpu_layers", [0, 2, 3, -1])
@pytest.mark.parametrize("name", MODELS)
def test_gpu_matches_cpu_build(
    tiny_paths: dict[str, Path], cpu_reference: dict[str, dict[str, Any]], name: str, n_gpu_layers: int,
    mtp_device: str | None,
) -> None:
    device = GPU if mtp_device == "gpu" else mtp_device
    got = run(tiny_paths, name, n_gpu_layers, device)
    ref = cpu_reference[name]
    assert got["plain"] == ref["plain"]
    assert got["mtp"] == ref["plain"]
    for key in ("drafted", "accepted", "iters", "draft_length_counts"):
        assert got[key] == ref[key], key
    expected = expected_devices(n_gpu_layers, device)
    if expected is not None and name != "hybrid":
        assert got["devices"] == expected


@needs_gpu
def test_gpu_model_reports_offload(tiny_paths: dict[str, Path]) -> None:
    model = load(tiny_paths, "random", -1, "CPU")
    assert (model.n_gpu_layers, model.mtp_device) == (-1, "CPU")


def test_gpu_check_dry_run(tmp_path: Path, cpu_reference: dict[str, dict[str, Any]]) -> None:
    """benchmarks/gpu_check.sh up to the CUDA build: the packed llama.cpp tree (pack_llama_cpp.sh)
    holds what the build needs (CUDA and RPC sources) and configures without the network."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "MTP_LLM_GPU_CHECK_BUILD": str(tmp_path), "MTP_LLM_GPU_CHECK_DRY_RUN": "1",
           "MTP_LLM_GPU_CHECK_PYTHON": sys.executable, "MTP_LLM_VENV": sys.prefix,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("OUT", None)
    subprocess.run(["bash", "benchmarks/pack_llama_cpp.sh", "--tree-only"], cwd=root, env=env, check=True)
    (tmp_path / "gpu-reference.json").write_text(json.dumps(cpu_reference))
    done = subprocess.run(["bash", "benchmarks/gpu_check.sh"], cwd=root, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "dry run: the packed tree configures" in done.stderr
    assert (tmp_path / "llama.cpp-src" / "ggml" / "src" / "ggml-rpc" / "ggml-rpc.cpp").is_file()
    assert not (tmp_path / "llama.cpp-src" / "ggml" / "src" / "ggml-vulkan").exists()
