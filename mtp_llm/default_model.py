"""Where the built-in default model lives.

The built-in default is SmolLM2-135M-Instruct (Hugging Face, Apache-2.0) with the MTP head the
package ships (``mtp_llm/models/smollm2-135m-mtp-head.gguf``), combined once in the cache directory
with the source file fetched from the package index (:mod:`mtp_llm.smollm2`). Where no trained head
is shipped, the default is the small Shakespeare hy_v3 model with an MTP head
(``mtp_llm/models/mtp-llm-default.gguf``), which stays in the package as a fast test model; a source
checkout without either falls back to a generated tiny test model so that everything still runs.
"""

from __future__ import annotations

from pathlib import Path

from .cache import cache_dir

MODELS_DIR = Path(__file__).parent / "models"
SHAKESPEARE_MODEL_NAME = "mtp-llm-default.gguf"
"""The 14M-parameter hy_v3 test model trained on Shakespeare (the default before SmolLM2)."""

__all__ = [
    "MODELS_DIR", "SHAKESPEARE_MODEL_NAME", "cache_dir", "default_model_path", "shakespeare_model_path",
    "shakespeare_split_paths",
]


def default_model_path() -> Path:
    """The built-in default model: SmolLM2-135M-Instruct with the shipped MTP head (made on first
    use, the source downloaded once), or the Shakespeare test model where no head is shipped."""
    from . import smollm2

    if smollm2.HEAD_SHA256:
        return smollm2.built_in_path()
    return shakespeare_model_path()


def shakespeare_model_path() -> Path:
    """The shipped Shakespeare test model, or a generated tiny model if it is absent."""
    shipped = MODELS_DIR / SHAKESPEARE_MODEL_NAME
    if shipped.exists():
        return shipped
    from .gguf.tiny_models import make_tiny_models

    return make_tiny_models(cache_dir() / "tiny-models")["random"]


def shakespeare_split_paths() -> tuple[Path, Path]:
    """The Shakespeare test model as trunk-only target plus ``mtp-`` sidecar (made on first use)."""
    from .gguf.hyv3 import split_mtp

    embedded = shakespeare_model_path()
    out = cache_dir() / "split" / f"{embedded.stem}-{embedded.stat().st_size}"
    trunk = out / f"{embedded.stem}-trunk.gguf"
    sidecar = out / f"mtp-{embedded.stem}-trunk.gguf"
    if not (trunk.exists() and sidecar.exists()):
        split_mtp(embedded, out)
    return trunk, sidecar
