"""Every ``python`` block of README.md and docs/*.md runs, and prints what the page shows.

A page's blocks run in order in one namespace, as a reader would run them in one interpreter, in a
fresh working directory that holds ``model.gguf`` (a tiny model with an embedded MTP head) and
``trunk.gguf`` + ``mtp-trunk.gguf`` (a tiny trunk-only model and its sidecar head), the files the
snippets name as "your model". A ``text`` block that follows a ``python`` block with only blank
lines between is that block's expected output, compared as doctest compares (``...`` matches
anything, whitespace is normalised). Pages that need more (a local Hub, an RPC server) get a
fixture from :mod:`tests.docs.page_fixtures`.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docs.page_fixtures import fixture_for

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(?P<indent> *)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)


@dataclass(frozen=True)
class Snippet:
    line: int
    code: str
    expected_output: str | None


def page_snippets(text: str) -> list[Snippet]:
    """The page's python blocks, each with the text block that shows its output, if any."""
    blocks = list(FENCE.finditer(text))
    snippets = []
    for k, block in enumerate(blocks):
        if block.group("info").strip() != "python":
            continue
        expected = None
        if k + 1 < len(blocks):
            following = blocks[k + 1]
            between = text[block.end() : following.start()]
            if following.group("info").strip() == "text" and not between.strip():
                expected = _dedent(following.group("body"), following.group("indent"))
        line = text.count("\n", 0, block.start()) + 1
        snippets.append(Snippet(line, _dedent(block.group("body"), block.group("indent")), expected))
    return snippets


def _dedent(body: str, indent: str) -> str:
    return "\n".join(line[len(indent) :] if line.startswith(indent) else line for line in body.splitlines()) + "\n"


def _pages_with_snippets() -> list[Path]:
    return [page for page in PAGES if page_snippets(page.read_text())]


def _page_id(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


@pytest.fixture()
def page_workdir(tmp_path: Path, tiny_paths: dict[str, Path]) -> Path:
    shutil.copy(tiny_paths["random"], tmp_path / "model.gguf")
    shutil.copy(tiny_paths["random-trunk"], tmp_path / "trunk.gguf")
    shutil.copy(tiny_paths["mtp-random-trunk"], tmp_path / "mtp-trunk.gguf")
    return tmp_path


@pytest.mark.parametrize("page", _pages_with_snippets(), ids=_page_id)
def test_page_snippets_run_and_print_what_the_page_shows(page: Path, page_workdir: Path) -> None:
    page_id = _page_id(page)
    namespace: dict[str, object] = {"__name__": "__main__"}
    checker = doctest.OutputChecker()
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    previous = Path.cwd()
    os.chdir(page_workdir)
    try:
        with fixture_for(page_id)(page_workdir):
            for snippet in page_snippets(page.read_text()):
                printed = io.StringIO()
                code = compile(snippet.code, f"{page_id}:{snippet.line}", "exec")
                try:
                    with contextlib.redirect_stdout(printed):
                        exec(code, namespace)
                except Exception as error:
                    raise AssertionError(
                        f"{page_id}, the block at line {snippet.line} raised {type(error).__name__}: {error}\n"
                        f"printed before it:\n{printed.getvalue()}"
                    ) from error
                if snippet.expected_output is not None:
                    got = printed.getvalue()
                    if not checker.check_output(snippet.expected_output, got, flags):
                        pytest.fail(
                            f"{page_id}, the block at line {snippet.line} printed:\n{got}\n"
                            f"the page shows:\n{snippet.expected_output}"
                        )
    finally:
        os.chdir(previous)
        for value in namespace.values():
            close = getattr(value, "close", None)
            if callable(close) and type(value).__module__.startswith("mtp_llm"):
                with contextlib.suppress(Exception):
                    close()


def test_the_extractor_pairs_a_block_with_the_output_that_follows_it() -> None:
    text = "intro\n\n```python\nprint(1)\n```\n\n```text\n1\n```\n\n```python\nx = 2\n```\nsaid\n```text\nnot output\n```\n"
    first, second = page_snippets(text)
    assert (first.line, first.code, first.expected_output) == (3, "print(1)\n", "1\n")
    assert (second.line, second.code, second.expected_output) == (11, "x = 2\n", None)
