"""Shared fixtures: the tiny GGUF models the project writes itself, and sessions on them."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from mtp_llm import MTP, Model
from mtp_llm.gguf.tiny_models import make_tiny_models

MODELS_DIR = Path(__file__).parent / ".models"

# One ggml thread: the machines running the suite have 2 cores and a spinning
# second thread slows decoding badly when anything else is busy.
THREADS = int(os.environ.get("MTP_LLM_TEST_THREADS", "1"))


class LoopTicker:
    """Counts event-loop turns while open: a call that blocked the loop leaves few ticks.

    >>> async with LoopTicker(interval=0.001) as ticker:
    ...     await llm.ainvoke("hello")
    >>> assert ticker.ticks >= 10
    """

    def __init__(self, interval: float = 0.0) -> None:
        self.interval = interval
        self.ticks = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while not self._stop.is_set():
            self.ticks += 1
            await asyncio.sleep(self.interval)

    async def __aenter__(self) -> LoopTicker:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._task is not None
        await self._task


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
    kwargs.setdefault("n_draft", 3)  # fixed: exact stats; n_draft="auto" has tests of its own
    return MTP(model, **kwargs)  # type: ignore[arg-type]


@pytest.fixture()
def random_session(random_model: Model) -> MTP:
    return make_session(random_model, n_draft=3)
