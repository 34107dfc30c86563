"""What the tests share besides fixtures (those are in tests/conftest.py): the thread count,
where the tiny models are written, a session factory, an event-loop ticker, the session
cases the cache and parallel tests run on.

Test modules import these from here (``from tests.helpers import THREADS``), never from
``conftest`` or from another test module.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from mtp_llm import MTP, Model

MODELS_DIR = Path(__file__).resolve().parents[1] / ".models"
"""Where the tiny GGUF models are written (once; gitignored)."""

# One ggml thread: the machines running the suite have 2 cores and a spinning
# second thread slows decoding badly when anything else is busy.
THREADS = int(os.environ.get("MTP_LLM_TEST_THREADS", "1"))

SESSION_CASES: dict[str, dict[str, Any]] = {
    "dense": {"target": "random", "n_draft": 3},
    "dense auto": {"target": "random", "n_draft": "auto"},
    "dense plain": {"target": "random", "n_draft": 0},
    "dense, llama.cpp's driver": {"target": "random", "n_draft": 3, "fuse_catch_up": False},
    "sidecar": {"target": "random-trunk", "draft": "mtp-random-trunk", "n_draft": 3},
    "hybrid rs": {"target": "hybrid", "n_draft": 3, "rollback": "rs"},
    "hybrid checkpoint": {"target": "hybrid", "n_draft": 3, "rollback": "checkpoint"},
}
"""Kinds of session on the tiny models: dense (fused, auto, plain, llama.cpp's driver), sidecar, hybrids."""


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


def make_session(model: Model, **kwargs: object) -> MTP:
    kwargs.setdefault("n_threads", THREADS)
    kwargs.setdefault("n_ctx", 512)
    kwargs.setdefault("n_draft", 3)  # fixed: exact stats; n_draft="auto" has tests of its own
    return MTP(model, **kwargs)  # type: ignore[arg-type]
