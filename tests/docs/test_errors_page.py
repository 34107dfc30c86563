"""docs/errors.md has a table row for every exception class the package exports, with its real bases."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pydantic
import pytest

import mtp_llm
from mtp_llm import MTPError

PAGE = Path(__file__).resolve().parents[2] / "docs" / "errors.md"
PUBLIC_MODULES = ("mtp_llm", "mtp_llm.langchain", "mtp_llm.llamaindex")


def exported_errors() -> dict[str, type[BaseException]]:
    """Every MTPError class (MTPError included) in the ``__all__`` of a public module."""
    found: dict[str, type[BaseException]] = {}
    for module_name in PUBLIC_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # an integration whose framework is not installed
            continue
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            if inspect.isclass(obj) and issubclass(obj, MTPError):
                assert found.get(name, obj) is obj, f"two different classes are exported as {name}"
                found[name] = obj
    return found


def all_package_errors() -> set[type[BaseException]]:
    """MTPError and every subclass defined in the package."""
    seen: set[type[BaseException]] = set()
    todo: list[type[BaseException]] = [MTPError]
    while todo:
        cls = todo.pop()
        if cls not in seen and cls.__module__.startswith("mtp_llm"):
            seen.add(cls)
            todo += cls.__subclasses__()
    return seen


def page_rows() -> dict[str, tuple[list[str], str, str]]:
    """The rows of the table whose header is ``class | base | when raised | the fix``:
    class name -> (base names, when, fix)."""
    rows: dict[str, tuple[list[str], str, str]] = {}
    in_table = False
    for line in PAGE.read_text().splitlines():
        if not line.startswith("|"):
            in_table = False
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "class":
            assert cells == ["class", "base", "when raised", "the fix"], f"unexpected header: {line}"
            in_table = True
            continue
        if not in_table or set(cells[0]) <= {"-", " "}:
            continue
        assert len(cells) == 4, f"a row of four cells expected: {line}"
        names = re.findall(r"`(\w+)`", cells[0])
        assert len(names) == 1, f"one class per row expected: {line}"
        assert names[0] not in rows, f"{names[0]} has two rows"
        rows[names[0]] = (re.findall(r"`(\w+)`", cells[1]), cells[2], cells[3])
    return rows


def test_every_mtp_error_of_the_package_is_exported() -> None:
    """So that the exported classes the page is checked against are all of them."""
    exported = set(exported_errors().values())
    assert exported == all_package_errors(), sorted(c.__name__ for c in all_package_errors() - exported)
    assert len(exported) >= 17


@pytest.mark.parametrize("name", sorted(exported_errors()))
def test_every_exported_error_has_a_row_with_its_bases(name: str) -> None:
    cls = exported_errors()[name]
    rows = page_rows()
    assert name in rows, f"docs/errors.md has no row for {name}"
    bases, when, fix = rows[name]
    assert bases == [b.__name__ for b in cls.__bases__], f"{name} derives from {cls.__bases__}, the page says {bases}"
    assert len(when) >= 10 and fix, f"{name}: the row must say when it is raised and how to fix it"


def test_the_page_has_no_row_for_a_class_the_package_lacks() -> None:
    unknown = sorted(set(page_rows()) - set(exported_errors()))
    assert not unknown, f"docs/errors.md has rows for classes that are not exported: {unknown}"


def test_an_integration_constructor_raises_invalid_option_error_not_pydantics(tiny_paths: dict[str, Path]) -> None:
    pytest.importorskip("langchain_core")
    from mtp_llm.langchain import ChatMTP

    with pytest.raises(mtp_llm.InvalidOptionError) as raised:
        ChatMTP(model_path=str(tiny_paths["random"]), temperature=-1)
    assert not isinstance(raised.value, pydantic.ValidationError)
    assert "temperature=-1: Input should be greater than or equal to 0" in str(raised.value)


def test_the_page_names_the_base_class_as_the_one_to_catch() -> None:
    text = PAGE.read_text()
    assert "subclass of `mtp_llm.MTPError`" in text
    assert mtp_llm.MTPError.__bases__ == (Exception,)
