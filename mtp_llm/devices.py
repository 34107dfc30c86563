"""ggml's backends and devices in this build: what `mtp-llm info` lists and where models can run."""

from __future__ import annotations

from dataclasses import dataclass

from . import _core


class GPUUnavailableWarning(RuntimeWarning):
    """``n_gpu_layers`` asked for offloading on a build or machine with no GPU device:
    the model runs on the CPU (see docs/gpu.md for GPU builds)."""


@dataclass(frozen=True)
class Device:
    """One ggml device: ``name`` is what ``Model.load(mtp_device=...)`` takes."""

    name: str
    """ggml's name: "CPU", "CUDA0", "Vulkan0", "MTL0", "ROCm0", ..."""
    description: str
    """The hardware, e.g. "NVIDIA H200"."""
    type: str
    """"cpu", "gpu", "igpu" (integrated, shares host memory) or "accel"."""
    backend: str
    """The ggml backend that registered it: "CPU", "CUDA", "Vulkan", "Metal", ..."""
    memory_free: int
    """Bytes free now (as the backend reports it)."""
    memory_total: int
    """Bytes in all."""
    variant: str = ""
    """For the CPU: the variant of ggml's CPU backend that runs ("zen4", "haswell", ...; "static" in a build for
    one CPU); "" for other devices."""


@dataclass(frozen=True)
class CPUBackend:
    """ggml's CPU backend in this process. A wheel ships one build of it per instruction-set level (ggml's variants,
    named after the first CPU that had them) and loads the best one this machine runs."""

    variant: str
    """The variant loaded ("zen4", "icelake", "haswell", "sse42", "armv8.2_2", ...), or "static" where the
    extension was built for one CPU (``-DGGML_NATIVE=ON``) and carries its backend inside."""
    path: str
    """The variant's library; "" for a static build."""
    runtime_variants: bool
    """Whether the variant was chosen at run time."""
    built: tuple[str, ...]
    """The variants this build ships."""
    scores: dict[str, int]
    """ggml's score of each shipped variant on this machine; 0 where the CPU (or the OS) lacks its instructions."""
    features: dict[str, str]
    """The loaded backend's feature list (``AVX2``, ``AVX512_VNNI``, ``REPACK``, ...), as ggml reports it."""


def cpu_backend() -> CPUBackend:
    """Which build of ggml's CPU backend runs here (``MTP_LLM_CPU_VARIANT=haswell`` forces one, for testing)."""
    info = _core.cpu_backend()
    return CPUBackend(
        variant=str(info["variant"]), path=str(info["path"]), runtime_variants=bool(info["runtime_variants"]),
        built=tuple(info["built"]), scores=dict(info["scores"]), features=dict(info["features"]),
    )


def list_backends() -> list[str]:
    """The ggml backends compiled into this build, e.g. ``["CPU"]`` or ``["CUDA", "CPU"]``."""
    return list(_core.list_backends())


def list_devices() -> list[Device]:
    """Every ggml device of this build on this machine, in ggml's order."""
    return [Device(**d) for d in _core.list_devices()]


def has_gpu() -> bool:
    """True when a GPU (or integrated GPU) device is there for ``n_gpu_layers`` to offload to."""
    return bool(_core.has_gpu())


__all__ = ["CPUBackend", "Device", "GPUUnavailableWarning", "cpu_backend", "has_gpu", "list_backends", "list_devices"]
