"""What a documentation page needs around its snippets beyond the shared working directory.

``PAGE_FIXTURES`` maps a page (its path relative to the repository root, e.g. ``docs/hub.md``) to a
context manager that takes the page's working directory and sets up what its snippets use (a local
Hub, an RPC server on 127.0.0.1, environment variables), undoing it on exit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

PageFixture = Callable[[Path], AbstractContextManager[None]]


@contextmanager
def _nothing(workdir: Path) -> Iterator[None]:
    yield


PAGE_FIXTURES: dict[str, PageFixture] = {}
"""Page path -> fixture; pages not listed get only the shared working directory."""


def fixture_for(page: str) -> PageFixture:
    return PAGE_FIXTURES.get(page, _nothing)
