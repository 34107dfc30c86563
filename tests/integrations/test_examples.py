"""The examples in examples/ run as written on the built-in model (SmolLM2-135M-Instruct with its
shipped MTP head)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(autouse=True)
def built_in_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MTP_LLM_MODEL", raising=False)


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_langchain_streaming_chat(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("langchain_core")
    stats = load("langchain_streaming_chat").main("Why is the sky blue?")
    out = capsys.readouterr().out
    # The greedy wording follows the build's rounding (test_cli_generate_runs_the_built_in_model): "Rayleigh
    # scattering" on an AVX-512 build before patch 0020, "...the human perception of light..." after it and on
    # an AVX2-only build (where "scattering" comes after the 96 tokens).
    assert any(word in out for word in ("Rayleigh", "scatter", "light")), out
    assert stats["tokens_emitted"] == 96 and stats["drafts_generated"] > 0
    assert stats["drafts_accepted"] == round(stats["acceptance_rate"] * stats["drafts_generated"])


def test_langchain_agent_calls_the_tool_then_answers(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("langchain.agents")
    state, calls = load("langchain_agent").main()
    kinds = [type(m).__name__ for m in state["messages"]]
    assert kinds == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]
    call = state["messages"][1].tool_calls[0]
    assert call["name"] == "multiply" and call["args"] == {"a": 12, "b": 7}
    assert state["messages"][2].content == "84"
    # the bounded loop ends with words, not another call (a 135M model's answer: "12 * 7")
    assert state["messages"][3].content and not state["messages"][3].tool_calls
    # The answering call reuses its prompt from the cache: the calling call's prompt and its tool call as
    # generated (tool_choice="none" keeps the tools in the prompt), all but the end-of-generation token
    # (sampled, never decoded); what is left is the tool's result and the turn markers. (150 of 163.)
    calling, answering = calls
    assert answering["prompt_tokens_cached"] == calling["prompt_tokens"] + calling["tokens_emitted"] - 1
    assert answering["prompt_tokens_cached"] >= 0.9 * answering["prompt_tokens"], answering


def test_llamaindex_rag_retrieves_and_answers(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("llama_index.core")
    answer, sources = load("llamaindex_rag").main("How tall is the Eiffel Tower?")
    assert "Eiffel Tower" in sources[0].node.get_content()
    assert "330" in answer
