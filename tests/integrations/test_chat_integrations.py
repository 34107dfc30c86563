"""Both integrations on the native path: a tiny random-weight model carrying llama.cpp's
Qwen3.5 template writes Qwen's own tool call (not the JSON fallback), with MTP drafting."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.messages import AIMessageChunk, HumanMessage, ToolMessage

from mtp_llm.langchain import ChatMTP
from mtp_llm.llamaindex import MTPLLM

from tests.helpers import THREADS
from tests.helpers.templates import TOOL


@pytest.fixture()
def qwen(template_models: dict[str, Path]) -> str:  # noqa: F811
    return str(template_models["Qwen3.5-4B"])


def test_langchain_forced_call_is_native_and_streams(qwen: str) -> None:
    chat = ChatMTP(model_path=qwen, n_ctx=4096, n_threads=THREADS, temperature=0, max_tokens=300, enable_thinking=False)
    bound = chat.bind_tools([TOOL], tool_choice="any")
    message = bound.invoke("Weather in Paris?")
    assert [(c["name"], c["args"]["days"] in (2, 5)) for c in message.tool_calls] == [("get_weather", True)]
    assert "<tool_call>" not in message.content
    chunks = list(bound.stream("Weather in Paris?"))
    assert any(c.tool_call_chunks for c in chunks[:-1] if isinstance(c, AIMessageChunk)) or chunks[-1].tool_call_chunks
    total = chunks[0]
    for c in chunks[1:]:
        total = total + c
    assert [(c["name"], c["args"]) for c in total.tool_calls] == [(c["name"], c["args"]) for c in message.tool_calls]
    assert total.usage_metadata is not None and total.usage_metadata["output_tokens"] > 0
    # The call and its result render back into the next turn.
    call = message.tool_calls[0]
    history = [HumanMessage("Weather in Paris?"), message, ToolMessage("sunny-42", tool_call_id=call["id"])]
    answer = chat.bind_tools([TOOL], tool_choice="none").invoke(history, max_tokens=4)
    assert answer.response_metadata["finish_reason"] == "length"


def test_llamaindex_forced_call_is_native(qwen: str) -> None:
    from llama_index.core.tools import FunctionTool

    def get_weather(days: int) -> str:
        """Weather forecast."""
        return "sunny"

    tool = FunctionTool.from_defaults(fn=get_weather)
    llm = MTPLLM(model_path=qwen, n_ctx=4096, n_threads=THREADS, temperature=0, max_tokens=300, enable_thinking=False)
    response = llm.chat_with_tools([tool], user_msg="Weather in Paris?", tool_required=True)
    calls = llm.get_tool_calls_from_response(response)
    assert [c.tool_name for c in calls] == ["get_weather"] and isinstance(calls[0].tool_kwargs.get("days"), int)
    assert len(calls[0].tool_id) == 9
    streamed = list(llm.stream_chat_with_tools([tool], user_msg="Weather in Paris?", tool_required=True))
    assert [c.tool_name for c in llm.get_tool_calls_from_response(streamed[-1])] == ["get_weather"]


def test_reasoning_budget_reaches_both_integrations(qwen: str) -> None:
    from llama_index.core.base.llms.types import ThinkingBlock
    from llama_index.core.llms import ChatMessage

    common = dict(model_path=qwen, n_ctx=2048, n_threads=THREADS, temperature=0, max_tokens=24)
    chat = ChatMTP(**common, reasoning_budget=3)
    unlimited = chat.invoke("Weather in Paris?", reasoning_budget=-1)  # the random model reasons until max_tokens
    assert unlimited.content == "" and unlimited.additional_kwargs["reasoning_content"]
    bounded = chat.invoke("Weather in Paris?")
    assert bounded.content and len(bounded.additional_kwargs["reasoning_content"].strip()) <= 3
    none = chat.invoke("Weather in Paris?", reasoning_budget=0)
    assert none.content and not none.additional_kwargs.get("reasoning_content", "").strip()

    def thinking(message: ChatMessage) -> str:
        return "".join(b.content or "" for b in message.blocks if isinstance(b, ThinkingBlock))

    llm = MTPLLM(**common, reasoning_budget=0)
    response = llm.chat([ChatMessage(role="user", content="Weather in Paris?")])
    assert response.message.content and not thinking(response.message).strip()
    unlimited_li = llm.chat([ChatMessage(role="user", content="Weather in Paris?")], reasoning_budget=-1)
    assert not unlimited_li.message.content and thinking(unlimited_li.message)


def test_reasoning_effort_reaches_both_integrations(template_models: dict[str, Path]) -> None:  # noqa: F811
    """Hunyuan's template closes the reasoning section at its default effort ("no_think") and opens it at "high"."""
    from llama_index.core.base.llms.types import ThinkingBlock
    from llama_index.core.llms import ChatMessage

    common = dict(model_path=str(template_models["tencent-Hy3"]), n_ctx=2048, n_threads=THREADS, temperature=0,
                  max_tokens=12, reasoning_budget=2)
    chat = ChatMTP(**common)
    assert not chat.invoke("Weather in Paris?").additional_kwargs.get("reasoning_content", "").strip()
    high = chat.invoke("Weather in Paris?", reasoning_effort="high")
    assert high.additional_kwargs["reasoning_content"].strip()
    assert ChatMTP(**common, reasoning_effort="high").invoke("Weather in Paris?").additional_kwargs == high.additional_kwargs

    def thinking(message: ChatMessage) -> str:
        return "".join(b.content or "" for b in message.blocks if isinstance(b, ThinkingBlock))

    question = [ChatMessage(role="user", content="Weather in Paris?")]
    assert not thinking(MTPLLM(**common).chat(question).message).strip()
    assert thinking(MTPLLM(**common, reasoning_effort="high").chat(question).message).strip()
    assert thinking(MTPLLM(**common).chat(question, reasoning_effort="high").message).strip()
