"""Unit tests load no GGUF file: a load fails the test at once (``pytest tests/unit`` runs in seconds)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from mtp_llm.model import Model


def _no_load(cls: type, path: Any, *args: Any, **kwargs: Any) -> Model:
    raise AssertionError(f"a unit test loaded a GGUF file ({path}): move it to tests/engine or tests/integrations")


@pytest.fixture(autouse=True)
def _no_model_loads(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(Model, "load", classmethod(_no_load))
    yield
