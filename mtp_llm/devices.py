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


def list_backends() -> list[str]:
    """The ggml backends compiled into this build, e.g. ``["CPU"]`` or ``["CUDA", "CPU"]``."""
    return list(_core.list_backends())


def list_devices() -> list[Device]:
    """Every ggml device of this build on this machine, in ggml's order."""
    return [Device(**d) for d in _core.list_devices()]


def has_gpu() -> bool:
    """True when a GPU (or integrated GPU) device is there for ``n_gpu_layers`` to offload to."""
    return bool(_core.has_gpu())


__all__ = ["Device", "GPUUnavailableWarning", "has_gpu", "list_backends", "list_devices"]
