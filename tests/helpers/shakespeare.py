"""The 14M-parameter hy_v3 test model trained on Shakespeare (tools/train_default_model), shipped in
tests/models with its PyTorch reference outputs and tokenizer cases: a fast real model whose head the
tests can check against its training code."""

from __future__ import annotations

from pathlib import Path

from mtp_llm.cache import cache_dir

TEST_MODELS_DIR = Path(__file__).resolve().parents[1] / "models"
SHAKESPEARE_MODEL = TEST_MODELS_DIR / "mtp-llm-default.gguf"
SHAKESPEARE_REFERENCE = TEST_MODELS_DIR / "mtp-llm-default.reference.npz"
SHAKESPEARE_TOKENS = TEST_MODELS_DIR / "mtp-llm-default.tokens.json"


def shakespeare_model_path() -> Path:
    return SHAKESPEARE_MODEL


def shakespeare_split_paths() -> tuple[Path, Path]:
    """The Shakespeare model as a trunk-only target plus its ``mtp-`` sidecar (made on first use)."""
    from mtp_llm.gguf.hyv3 import split_mtp

    embedded = SHAKESPEARE_MODEL
    out = cache_dir() / "split" / f"{embedded.stem}-{embedded.stat().st_size}"
    trunk = out / f"{embedded.stem}-trunk.gguf"
    sidecar = out / f"mtp-{embedded.stem}-trunk.gguf"
    if not (trunk.exists() and sidecar.exists()):
        split_mtp(embedded, out)
    return trunk, sidecar
