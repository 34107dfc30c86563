"""docs/stats.md has a table row for every field of the stats schema (``mtp_llm.MTPStats`` and the
dataclasses nested in it), and none for a field the schema lacks."""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from pathlib import Path
from typing import Any

import pytest

from mtp_llm import MTP, DraftControllerEstimates, MTPStats, TimingUs

PAGE = Path(__file__).resolve().parents[2] / "docs" / "stats.md"
ROW = re.compile(r"^\|\s*`(?P<name>[^`]+)`\s*\|(?P<rest>.*)\|\s*$")


def _nested_dataclass(annotation: Any) -> type | None:
    """The dataclass a field holds (``X`` or ``X | None``), else None."""
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    candidates = typing.get_args(annotation) if union else (annotation,)
    found = [c for c in candidates if isinstance(c, type) and dataclasses.is_dataclass(c)]
    return found[0] if found else None


def schema_fields(cls: type = MTPStats, prefix: str = "") -> list[str]:
    """Every field of the schema, nested ones as ``parent.child``, in declaration order."""
    hints = typing.get_type_hints(cls)
    names: list[str] = []
    for field in dataclasses.fields(cls):
        name = prefix + field.name
        names.append(name)
        nested = _nested_dataclass(hints[field.name])
        if nested is not None:
            names += schema_fields(nested, prefix=name + ".")
    return names


def dict_fields(d: dict[str, Any], prefix: str = "") -> list[str]:
    """The keys of ``MTPStats.to_dict()``, nested dicts as ``parent.child``."""
    names: list[str] = []
    for key, value in d.items():
        names.append(prefix + key)
        if isinstance(value, dict):
            names += dict_fields(value, prefix=prefix + key + ".")
    return names


def page_field_rows() -> dict[str, list[str]]:
    """The rows of the page's field tables (those whose first column is ``field``): name -> other cells."""
    rows: dict[str, list[str]] = {}
    in_field_table = False
    for line in PAGE.read_text().splitlines():
        if not line.startswith("|"):
            in_field_table = False
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "field":
            in_field_table = True
            assert cells == ["field", "unit", "meaning", "also in"], f"unexpected field-table header: {line}"
            continue
        match = ROW.match(line)
        if in_field_table and match:
            name = match["name"]
            assert name not in rows, f"{name} has two rows in docs/stats.md"
            rows[name] = cells[1:]
    return rows


def test_the_schema_walk_finds_the_nested_timing_and_controller_fields() -> None:
    fields = schema_fields()
    assert [f for f in fields if f.startswith("timing_us.")] == [
        f"timing_us.{f.name}" for f in dataclasses.fields(TimingUs)
    ]
    assert [f for f in fields if f.startswith("draft_controller.")] == [
        f"draft_controller.{f.name}" for f in dataclasses.fields(DraftControllerEstimates)
    ]
    assert {"iters", "acceptance_rate", "tokens_emitted", "timing_us.total", "draft_controller.choice"} <= set(fields)


def test_to_dict_publishes_exactly_the_schema_fields(random_session: MTP) -> None:
    random_session.generate("To be, or not to be", max_tokens=8, temp=0)
    published = random_session.last_stats.to_dict()
    assert published["draft_controller"] is not None, "a drafting session publishes its controller's estimates"
    assert dict_fields(published) == schema_fields()


def test_every_schema_field_has_a_row_on_the_stats_page() -> None:
    rows = page_field_rows()
    missing = [name for name in schema_fields() if name not in rows]
    assert not missing, f"docs/stats.md has no table row for: {missing}"


def test_the_stats_page_lists_no_field_the_schema_lacks() -> None:
    extra = sorted(set(page_field_rows()) - set(schema_fields()))
    assert not extra, f"docs/stats.md has rows for fields MTPStats does not have: {extra}"


@pytest.mark.parametrize("name", schema_fields())
def test_each_row_gives_a_unit_and_a_meaning(name: str) -> None:
    unit, meaning, _also = page_field_rows()[name]
    assert len(meaning) >= 10, f"{name}: the meaning cell is empty or too short: {meaning!r}"
    if name.endswith("_us") or name.startswith("timing_us"):
        assert unit == "µs", f"{name} is in microseconds, the page says {unit!r}"
    elif name != "draft_controller":  # a nested record: no unit of its own
        assert unit, f"{name}: no unit"


@pytest.mark.parametrize("name", ["timing_us", "draft_controller"])
def test_the_rows_of_nested_records_name_their_class(name: str) -> None:
    nested = _nested_dataclass(typing.get_type_hints(MTPStats)[name])
    assert nested is not None
    assert f"`{nested.__name__}`" in page_field_rows()[name][1]


def test_the_usage_metadata_the_page_names_is_what_chatmtp_reports(tiny_paths: dict[str, Path]) -> None:
    """Rows whose "also in" cell names a LangChain ``usage_metadata`` key: ChatMTP reports that field's value there."""
    pytest.importorskip("langchain_core")
    from langchain_core.messages import AIMessage

    from mtp_llm.langchain import ChatMTP

    claimed: dict[str, str] = {}
    for name, (_unit, _meaning, also) in page_field_rows().items():
        if "usage_metadata" in also:
            claimed[name] = re.findall(r"\w+", also.replace("usage_metadata", ""))[-1]
    assert claimed == {
        "tokens_emitted": "output_tokens",
        "prompt_tokens": "input_tokens",
        "prompt_tokens_cached": "cache_read",
    }
    chat = ChatMTP(model_path=str(tiny_paths["random"]), n_draft=3, n_threads=2, max_tokens=6, temperature=0)
    chat.invoke("hello")
    message = chat.invoke("hello")  # the second call reuses the first one's prompt: cache_read > 0
    stats = message.response_metadata["mtp_stats"]
    assert isinstance(message, AIMessage) and message.usage_metadata is not None
    usage: dict[str, Any] = {**message.usage_metadata, **message.usage_metadata.get("input_token_details", {})}
    assert usage["cache_read"] > 0
    for field, key in claimed.items():
        assert usage[key] == stats[field], f"usage_metadata[{key!r}] is not {field}"
