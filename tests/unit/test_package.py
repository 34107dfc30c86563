"""Package surface: public names, stubs matching the extension, CLI, default model."""

from __future__ import annotations

import ast
from pathlib import Path

import mtp_llm
from mtp_llm import _core

ROOT = Path(__file__).resolve().parents[2]


def test_public_names() -> None:
    assert {"Model", "MTP", "MTPError", "MTPStats", "STATS_KEY"} <= set(mtp_llm.__all__)
    for name in mtp_llm.__all__:
        assert hasattr(mtp_llm, name), name
    assert issubclass(mtp_llm.ModelLoadError, mtp_llm.MTPError)


def test_stub_matches_extension() -> None:
    tree = ast.parse((ROOT / "mtp_llm" / "_core.pyi").read_text())
    stub: dict[str, set[str]] = {"": set()}
    by_name: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            stub[""].add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            stub[""].add(node.target.id)  # constants
        elif isinstance(node, ast.ClassDef):
            stub[""].add(node.name)
            stub[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("__")}
            if any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in node.body):
                by_name.add(node.name)  # option structs: their fields are the dataclasses' (tests/unit/test_options.py)
            stub[node.name] |= {n.target.id for n in node.body if isinstance(n, ast.AnnAssign)
                                and isinstance(n.target, ast.Name)}
    public = {n for n in dir(_core) if not n.startswith("_")}
    assert stub[""] == public
    for cls in ("Model", "ModelOptions", "ControllerEstimates", "Session", "ContextOptions", "SamplingOptions",
                "GenerateOptions"):
        native = {n for n in dir(getattr(_core, cls)) if not n.startswith("_")}
        assert stub[cls] == (set() if cls in by_name else native), cls
    assert by_name == {"ContextOptions", "SamplingOptions", "GenerateOptions"}


def test_research_bindings_live_in_internals_with_stubs() -> None:
    """Bindings for tests and tools sit in ``_core.internals``, out of the public surface, and the stub
    declares each of them and each member of its classes."""
    tree = ast.parse((ROOT / "mtp_llm" / "_core.pyi").read_text())
    internals = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "internals")
    declared = {n.name for n in internals.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    research = {"forward_with_head", "trunk_hidden_states", "ThreadController", "DraftController"}
    assert declared == {n for n in dir(_core.internals) if not n.startswith("_")} == research
    assert not research & set(dir(_core))
    for cls in (n for n in internals.body if isinstance(n, ast.ClassDef)):
        members = {n.name for n in cls.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("__")}
        native = {n for n in dir(getattr(_core.internals, cls.name)) if not n.startswith("_")}
        assert members == native, cls.name


def test_py_typed_is_shipped() -> None:
    assert (ROOT / "mtp_llm" / "py.typed").exists()












