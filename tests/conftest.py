"""Shared fixtures: the tiny GGUF models the project writes itself, and sessions on them.

Helpers that are not fixtures live in :mod:`tests.helpers`."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtp_llm import MTP, Model
from mtp_llm.gguf.tiny_models import make_tiny_models
from tests.helpers import MODELS_DIR, make_session
from tests.helpers.templates import write_template_models


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


@pytest.fixture()
def random_session(random_model: Model) -> MTP:
    return make_session(random_model, n_draft=3)


@pytest.fixture(scope="session")
def template_models() -> dict[str, Path]:
    """A tiny random-weight model per chat template of the pinned llama.cpp tree."""
    return write_template_models(MODELS_DIR / "templates")
