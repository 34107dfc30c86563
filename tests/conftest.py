"""Shared fixtures: the tiny GGUF models the project writes itself, and sessions on them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mtp_llm import MTP, Model
from mtp_llm.tiny_models import make_tiny_models

MODELS_DIR = Path(__file__).parent / ".models"

# One ggml thread: the machines running the suite have 2 cores and a spinning
# second thread slows decoding badly when anything else is busy.
THREADS = int(os.environ.get("MTP_LLM_TEST_THREADS", "1"))


@pytest.fixture(scope="session")
def tiny_paths() -> dict[str, Path]:
    return make_tiny_models(MODELS_DIR)


@pytest.fixture(scope="session")
def random_model(tiny_paths: dict[str, Path]) -> Model:
    return Model.load(tiny_paths["random"])


@pytest.fixture(scope="session")
def accept100_model(tiny_paths: dict[str, Path]) -> Model:
    return Model.load(tiny_paths["accept100"])


@pytest.fixture(scope="session")
def accept33_model(tiny_paths: dict[str, Path]) -> Model:
    return Model.load(tiny_paths["accept33"])


def make_session(model: Model, **kwargs: object) -> MTP:
    kwargs.setdefault("n_threads", THREADS)
    kwargs.setdefault("n_ctx", 512)
    return MTP(model, **kwargs)  # type: ignore[arg-type]


@pytest.fixture()
def random_session(random_model: Model) -> MTP:
    return make_session(random_model, n_draft=3)
