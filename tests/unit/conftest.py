"""Unit tests load no GGUF file: a load fails the test at once (``pytest tests/unit`` runs in seconds)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from mtp_llm import _core


class _NoModels:
    def __init__(self, path: str, *args: Any) -> None:
        raise AssertionError(f"a unit test loaded a GGUF file ({path}): move it to tests/engine or tests/integrations")


@pytest.fixture(autouse=True)
def _no_model_loads(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(_core, "Model", _NoModels)
    yield
