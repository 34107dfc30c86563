"""The pages stay a user's reference: a short README, docs of a readable size, and text that says what is (no
work history) in the docs and the code."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOC_PAGES = sorted((ROOT / "docs").glob("*.md"))
HISTORY = re.compile(r"[Ss]essions? [0-9]+|[Ii]ssue [0-9]+")
TIMELESS_TREES = ["docs", "csrc", "mtp_llm", "tests", "benchmarks"]


def test_the_readme_is_short_with_lines_of_at_most_120_characters() -> None:
    assert len(README.read_bytes()) <= 8 * 1024
    long_lines = [n for n, line in enumerate(README.read_text().splitlines(), 1) if len(line) > 120]
    assert long_lines == []


def test_readme_and_docs_total_at_most_150_kb() -> None:
    total = sum(len(page.read_bytes()) for page in [README, *DOC_PAGES])
    assert total <= 150 * 1024, f"{total} bytes"


def test_the_readme_keeps_its_two_set_up_commands() -> None:
    text = README.read_text()
    assert "bash scripts/main.sh" in text and "bash scripts/test.sh" in text


def test_docs_code_and_tests_cite_no_sessions_or_issues() -> None:
    files = [README, *(path for tree in TIMELESS_TREES for path in (ROOT / tree).rglob("*") if path.is_file())]
    hits = []
    for path in files:
        if path.suffix in {".gguf", ".npz", ".png", ".so", ".pyc"} or "__pycache__" in path.parts:
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if HISTORY.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{n}")
    assert hits == []


def test_every_page_is_in_the_mkdocs_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    assert [page.name for page in DOC_PAGES if f": {page.name}" not in nav] == []
