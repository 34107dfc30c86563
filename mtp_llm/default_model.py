"""Where the built-in default model lives.

The package ships a small trained hy_v3 model with an MTP head
(``mtp_llm/models/mtp-llm-default.gguf``). A source checkout without it falls
back to a generated tiny test model so that everything still runs.
"""

from __future__ import annotations

from pathlib import Path

from .cache import cache_dir

MODELS_DIR = Path(__file__).parent / "models"
DEFAULT_MODEL_NAME = "mtp-llm-default.gguf"

__all__ = ["DEFAULT_MODEL_NAME", "MODELS_DIR", "cache_dir", "default_model_path", "default_split_paths"]


def default_model_path() -> Path:
    """The shipped default model, or a generated tiny model if it is absent."""
    shipped = MODELS_DIR / DEFAULT_MODEL_NAME
    if shipped.exists():
        return shipped
    from .gguf.tiny_models import make_tiny_models

    return make_tiny_models(cache_dir() / "tiny-models")["random"]


def default_split_paths() -> tuple[Path, Path]:
    """The default model as trunk-only target plus ``mtp-`` sidecar (made on first use)."""
    from .gguf.hyv3 import split_mtp

    embedded = default_model_path()
    out = cache_dir() / "split" / f"{embedded.stem}-{embedded.stat().st_size}"
    trunk = out / f"{embedded.stem}-trunk.gguf"
    sidecar = out / f"mtp-{embedded.stem}-trunk.gguf"
    if not (trunk.exists() and sidecar.exists()):
        split_mtp(embedded, out)
    return trunk, sidecar
