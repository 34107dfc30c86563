"""LlamaIndex integration on the real engine and real llama-index-core: stats, events, async, RAG, agents."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core import Document, Settings, VectorStoreIndex
from llama_index.core.agent.workflow import AgentStream, FunctionAgent, ToolCallResult
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.llm import (
    LLMChatEndEvent,
    LLMChatStartEvent,
    LLMCompletionEndEvent,
    LLMCompletionStartEvent,
)
from llama_index.core.llms.custom import CustomLLM
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import LLM
from llama_index.core.tools import FunctionTool

from mtp_llm import STATS_KEY, ChatParseError, InvalidOptionError, Model
from mtp_llm._integration import DEFAULT_CHAT_TEMPLATE, chat_prompt
from mtp_llm.llamaindex import MTPLLM, MTPEmbedding, MTPStatsEvent

from tests.helpers import THREADS, LoopTicker

pytestmark = pytest.mark.filterwarnings(
    # raised inside llama-index's workflow package when an agent is built
    "ignore::pydantic.warnings.PydanticDeprecationWarning"
)

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


class Recorder(BaseEventHandler):
    """Collects every instrumentation event."""

    events: list[BaseEvent]

    @classmethod
    def class_name(cls) -> str:
        return "Recorder"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        self.events.append(event)

    def of(self, kind: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]


@pytest.fixture()
def recorder() -> Iterator[Recorder]:
    root = get_dispatcher()
    handler = Recorder(events=[])  # a fresh list per test
    root.add_event_handler(handler)
    try:
        yield handler
    finally:
        root.event_handlers.remove(handler)


@pytest.fixture(autouse=True)
def no_default_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing may fall back to LlamaIndex's (networked) default LLM or embedding."""
    import llama_index.core.settings as settings_module

    def guard(resolve: Any, kind: type) -> Any:
        def checked(value: Any = None, *args: Any, **kwargs: Any) -> Any:
            if not isinstance(value, kind):
                raise AssertionError(  # noqa: TRY004 (a test failure, not a type error)
                    f"a test reached LlamaIndex's default {kind.__name__} (network): {value!r}"
                )
            return resolve(value, *args, **kwargs)

        return checked

    monkeypatch.setattr(settings_module, "resolve_llm", guard(settings_module.resolve_llm, LLM))
    monkeypatch.setattr(
        settings_module, "resolve_embed_model", guard(settings_module.resolve_embed_model, BaseEmbedding)
    )
    monkeypatch.setattr(Settings, "_llm", None)
    monkeypatch.setattr(Settings, "_embed_model", None)


def make_llm(path: Path | None, **kwargs: Any) -> MTPLLM:
    """An MTPLLM on ``path`` (None: the built-in default model)."""
    kwargs.setdefault("n_threads", THREADS)
    kwargs.setdefault("n_ctx", 1024)
    kwargs.setdefault("temperature", 0)
    kwargs.setdefault("n_draft", 3)  # fixed: exact stats
    return MTPLLM(model_path=None if path is None else str(path), **kwargs)


# ------------------------------------------------------------ basics ---


def test_class_hierarchy_and_cheap_shared_construction(tiny_paths: dict[str, Path]) -> None:
    a = make_llm(tiny_paths["accept100"])
    b = make_llm(tiny_paths["accept100"], max_tokens=7)
    assert isinstance(a, CustomLLM) and isinstance(a, FunctionCallingLLM)
    assert a._own_session is None, "construction must not load the model"
    assert a.session is b.session, "same engine settings share one native session"
    assert make_llm(tiny_paths["accept100"], n_ctx=512).session is not a.session


def test_metadata(tiny_paths: dict[str, Path]) -> None:
    llm = make_llm(tiny_paths["accept100"], n_ctx=768, max_tokens=33)
    meta = llm.metadata
    assert meta.context_window == 768 == llm.session.n_ctx
    assert meta.num_output == 33
    assert meta.model_name == "accept100"
    assert meta.is_function_calling_model
    assert not meta.is_chat_model, "the tiny model has no chat template"
    assert make_llm(tiny_paths["accept100"], n_ctx=768, chat_template=CHATML).metadata.is_chat_model


def expect_exact_accept100_stats(stats: dict[str, Any], tokens: int) -> None:
    # accept100 at n_draft=3: every draft is accepted, each verify pass commits 4 tokens.
    assert stats["acceptance_rate"] == 1.0
    assert stats["tokens_emitted"] == tokens
    assert stats["drafts_generated"] == stats["drafts_accepted"] == 3 * (tokens // 4)
    assert stats["iters"] == tokens // 4
    assert stats["mean_accepted_length"] == 4.0
    assert stats["acceptance_rate_per_position"] == [1.0, 1.0, 1.0]
    assert stats["n_draft"] == 3
    assert stats["generations"] == 1


def test_complete_exact_stats_in_response_end_event_and_stats_event(
    tiny_paths: dict[str, Path], recorder: Recorder
) -> None:
    llm = make_llm(tiny_paths["accept100"], max_tokens=12)
    resp = llm.complete("Hello")
    assert resp.text == "a" * 12
    expect_exact_accept100_stats(resp.additional_kwargs[STATS_KEY], 12)
    assert resp.additional_kwargs["finish_reason"] == "length"

    (start,) = recorder.of(LLMCompletionStartEvent)
    (end,) = recorder.of(LLMCompletionEndEvent)
    expect_exact_accept100_stats(end.response.additional_kwargs[STATS_KEY], 12)
    (stats_event,) = recorder.of(MTPStatsEvent)
    assert stats_event.final and stats_event.finish_reason == "length"
    assert stats_event.stats == resp.additional_kwargs[STATS_KEY]
    assert stats_event.span_id is not None
    assert stats_event.span_id == start.span_id == end.span_id
    assert stats_event.span_id.startswith("MTPLLM.complete")


def test_stream_complete_deltas_progress_events_and_span_ids(tiny_paths: dict[str, Path], recorder: Recorder) -> None:
    llm = make_llm(tiny_paths["accept100"], emit_stats_every=4)
    chunks = list(llm.stream_complete("Hello", max_tokens=12))
    deltas = [c.delta for c in chunks]
    assert "".join(d for d in deltas if d) == chunks[-1].text == "a" * 12
    assert all(c.text == "a" * i for i, c in enumerate(chunks[:-1], start=1)), "text is cumulative"
    expect_exact_accept100_stats(chunks[-1].additional_kwargs[STATS_KEY], 12)
    assert all(STATS_KEY not in c.additional_kwargs for c in chunks[:-1]), "stats ride on the last chunk only"

    (start,) = recorder.of(LLMCompletionStartEvent)
    (end,) = recorder.of(LLMCompletionEndEvent)
    assert end.response.additional_kwargs[STATS_KEY] == chunks[-1].additional_kwargs[STATS_KEY]
    events = recorder.of(MTPStatsEvent)
    assert [e.final for e in events] == [False, False, False, True]
    assert [e.stats["tokens_emitted"] for e in events] == [4, 8, 12, 12]
    # Fired from inside the generator, after the span closed: still the call's span.
    assert {e.span_id for e in events} == {start.span_id} == {end.span_id}
    assert start.span_id is not None


def test_per_call_options_override_defaults(tiny_paths: dict[str, Path]) -> None:
    llm = make_llm(tiny_paths["random"], max_tokens=40, stop=["never-there"])
    full = llm.complete("Hello").text
    assert len(llm.session.model.tokenize(full, add_special=False)) >= 10
    stop = full[len(full) // 2 : len(full) // 2 + 2]
    cut = llm.complete("Hello", stop=[stop])
    assert cut.text == full[: full.index(stop)]
    assert cut.additional_kwargs["finish_reason"] == "stop"
    short = llm.complete("Hello", max_tokens=3)
    assert short.additional_kwargs[STATS_KEY]["tokens_emitted"] == 3

    forced = make_llm(tiny_paths["accept100"]).complete("Hello", max_tokens=20, grammar='root ::= "bbb" "x"')
    assert forced.text == "bbbx", "a per-call grammar overrides the model's choice"
    with pytest.raises(InvalidOptionError, match=r"^the call got unknown option 'not_an_option' \(no option of that name\)"):
        llm.complete("Hello", not_an_option=1)
    with pytest.raises(InvalidOptionError, match=r"^the call got unknown option 'num_predict' \(Ollama's name\): use max_tokens"):
        llm.complete("Hello", num_predict=1)


# --------------------------------------------------------------- chat ---


def test_chat_uses_template_override_and_fires_one_pair(tiny_paths: dict[str, Path], recorder: Recorder) -> None:
    llm = make_llm(tiny_paths["accept100"], chat_template=CHATML, max_tokens=8)
    messages = [ChatMessage(role="system", content="Be brief."), ChatMessage(role="user", content="Hi")]
    resp = llm.chat(messages)
    assert resp.message.role == "assistant" and resp.message.content == "a" * 8
    model: Model = llm.session.model
    rendered = chat_prompt(model, [("system", "Be brief."), ("user", "Hi")], CHATML)
    assert "<|im_start|>user\nHi<|im_end|>" in rendered
    assert resp.additional_kwargs[STATS_KEY]["prompt_tokens"] == len(model.tokenize(rendered))
    expect_exact_accept100_stats(resp.additional_kwargs[STATS_KEY], 8)

    chunks = list(llm.stream_chat(messages))
    assert "".join(c.delta or "" for c in chunks) == chunks[-1].message.content == "a" * 8
    expect_exact_accept100_stats(chunks[-1].additional_kwargs[STATS_KEY], 8)
    assert len(recorder.of(LLMChatStartEvent)) == len(recorder.of(LLMChatEndEvent)) == 2
    assert not recorder.of(LLMCompletionStartEvent), "chat must not nest a completion call"
    ends = recorder.of(LLMChatEndEvent)
    assert ends[-1].response.additional_kwargs[STATS_KEY] == chunks[-1].additional_kwargs[STATS_KEY]
    assert [e.span_id for e in recorder.of(MTPStatsEvent)] == [e.span_id for e in ends]


def test_chat_without_template_uses_chatml_or_users_formatter(tiny_paths: dict[str, Path]) -> None:
    messages = [ChatMessage(role="user", content="Hi")]
    plain = make_llm(tiny_paths["accept100"], max_tokens=4)
    model: Model = plain.session.model
    chatml = chat_prompt(model, [("user", "Hi")], DEFAULT_CHAT_TEMPLATE)
    resp = plain.chat(messages)
    assert resp.additional_kwargs[STATS_KEY]["prompt_tokens"] == len(model.tokenize(chatml))
    custom = make_llm(tiny_paths["accept100"], max_tokens=4, messages_to_prompt=lambda ms: "Q: Hi\nA:")
    resp = custom.chat(messages)
    assert resp.additional_kwargs[STATS_KEY]["prompt_tokens"] == len(model.tokenize("Q: Hi\nA:"))


def test_chat_engine_two_turns(tiny_paths: dict[str, Path], recorder: Recorder) -> None:
    llm = make_llm(tiny_paths["random"], chat_template=CHATML, max_tokens=12)
    engine = SimpleChatEngine.from_defaults(llm=llm, system_prompt="You are terse.")
    first = engine.chat("My name is Ada.")
    second = engine.chat("What is my name?")
    assert str(first) and str(second)
    starts = recorder.of(LLMChatStartEvent)
    assert len(starts) == 2
    history = [(m.role.value, m.content) for m in starts[1].messages]
    assert ("user", "My name is Ada.") in history
    assert ("assistant", str(first)) in history, "the second turn sees the first answer"
    assert history[-1] == ("user", "What is my name?")
    finals = [e for e in recorder.of(MTPStatsEvent) if e.final]
    assert [e.span_id for e in finals] == [e.span_id for e in recorder.of(LLMChatEndEvent)]
    assert all(e.stats["generations"] == 1 for e in finals)


# -------------------------------------------------------------- async ---


async def test_async_does_not_block_and_fires_one_pair(tiny_paths: dict[str, Path], recorder: Recorder) -> None:
    llm = make_llm(tiny_paths["random"], n_ctx=2048, max_tokens=600)
    async with LoopTicker(interval=0.001) as ticker:
        started = time.perf_counter()
        resp = await llm.acomplete("Hello")
        elapsed = time.perf_counter() - started
        ticks_during_call = ticker.ticks
        stream_chunks = [c async for c in await llm.astream_complete("Hello")]
    assert resp.additional_kwargs[STATS_KEY]["tokens_emitted"] == 600
    assert ticks_during_call >= 5 and ticks_during_call >= elapsed / 0.01, (
        f"the event loop was blocked ({ticks_during_call} ticks in {elapsed:.3f}s)"
    )
    assert "".join(c.delta or "" for c in stream_chunks) == stream_chunks[-1].text == resp.text
    starts, ends = recorder.of(LLMCompletionStartEvent), recorder.of(LLMCompletionEndEvent)
    assert len(starts) == len(ends) == 2, "exactly one start/end pair per call"
    assert [s.span_id for s in starts] == [e.span_id for e in ends]
    assert [e.span_id for e in recorder.of(MTPStatsEvent)] == [s.span_id for s in starts]


async def test_async_chat_and_stream_chat(tiny_paths: dict[str, Path], recorder: Recorder) -> None:
    llm = make_llm(tiny_paths["accept100"], chat_template=CHATML, max_tokens=8, emit_stats_every=4)
    messages = [ChatMessage(role="user", content="Hi")]
    resp = await llm.achat(messages)
    chunks = [c async for c in await llm.astream_chat(messages)]
    assert resp.message.content == chunks[-1].message.content == "".join(c.delta or "" for c in chunks) == "a" * 8
    expect_exact_accept100_stats(resp.additional_kwargs[STATS_KEY], 8)
    expect_exact_accept100_stats(chunks[-1].additional_kwargs[STATS_KEY], 8)
    starts, ends = recorder.of(LLMChatStartEvent), recorder.of(LLMChatEndEvent)
    assert len(starts) == len(ends) == 2
    events = recorder.of(MTPStatsEvent)
    assert [(e.span_id, e.final) for e in events] == [
        (starts[0].span_id, False),
        (starts[0].span_id, False),
        (starts[0].span_id, True),
        (starts[1].span_id, False),
        (starts[1].span_id, False),
        (starts[1].span_id, True),
    ]


async def test_cancel_stops_native_loop_and_session_is_reusable(tiny_paths: dict[str, Path]) -> None:
    llm = make_llm(tiny_paths["random"], n_ctx=4096, max_tokens=24)
    expected = (await llm.acomplete("Hello")).text
    first_chunk = asyncio.Event()

    async def consume() -> None:
        async for _ in await llm.astream_complete("Hello", max_tokens=4000):
            first_chunk.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first_chunk.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    stats = llm.session.last_stats
    assert stats.tokens_emitted < 4000, "cancelling stopped the native loop"
    assert (await llm.acomplete("Hello")).text == expected
    assert llm.complete("Hello").text == expected

    # Abandoning a sync stream also frees the session.
    stream = llm.stream_complete("Hello", max_tokens=4000)
    next(stream)
    stream.close()
    assert llm.complete("Hello").text == expected


async def test_concurrent_async_calls_share_the_session_with_per_call_stats(tiny_paths: dict[str, Path]) -> None:
    llm = make_llm(tiny_paths["accept100"])
    other = make_llm(tiny_paths["accept100"], max_tokens=4)  # same engine settings: same session
    first, second = await asyncio.gather(llm.acomplete("Hi", max_tokens=8), other.acomplete("Hello"))
    assert (first.text, second.text) == ("a" * 8, "a" * 4)
    expect_exact_accept100_stats(first.additional_kwargs[STATS_KEY], 8)
    expect_exact_accept100_stats(second.additional_kwargs[STATS_KEY], 4)


async def test_cancel_non_streaming_call(tiny_paths: dict[str, Path], recorder: Recorder) -> None:
    llm = make_llm(tiny_paths["random"], n_ctx=4096, max_tokens=24)
    expected = (await llm.acomplete("Hello")).text
    task = asyncio.create_task(llm.acomplete("Hello", max_tokens=4000, emit_stats_every=2))
    while not recorder.of(MTPStatsEvent)[1:]:  # the first is the reference call's final event
        assert not task.done(), "the generation finished before it could be cancelled"
        await asyncio.sleep(0.001)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert 2 <= llm.session.last_stats.tokens_emitted < 4000, "cancelled mid-generation"
    assert not [e for e in recorder.of(MTPStatsEvent)[1:] if e.final]
    assert (await llm.acomplete("Hello")).text == expected


# ----------------------------------------------------------- RAG ---


def test_offline_rag_pipeline_streams_with_stats(tiny_paths: dict[str, Path], recorder: Recorder) -> None:
    path = tiny_paths["random"]
    embed_model = MTPEmbedding(model_path=str(path), n_threads=THREADS)
    assert embed_model._model is None, "construction must not load the model"
    query_vec = embed_model.get_query_embedding("capital of France")
    assert len(query_vec) == llm_dim(path) and abs(sum(x * x for x in query_vec) - 1.0) < 1e-4
    llm = make_llm(path, n_ctx=4096, max_tokens=24, chat_template=CHATML)
    assert embed_model.model is llm.session.model, "the LLM and the embedding share the loaded weights"
    Settings.llm, Settings.embed_model = llm, embed_model  # the no_default_models fixture restores both
    docs = [
        Document(text="Paris is the capital of France."),
        Document(text="MTP heads draft several tokens; the target model verifies them in one pass."),
        Document(text="The Nile flows north through Africa into the Mediterranean."),
    ]
    index = VectorStoreIndex.from_documents(docs)
    engine = index.as_query_engine(streaming=True, similarity_top_k=2)
    response = engine.query("What is the capital of France?")
    assert len(response.source_nodes) == 2
    pieces = [p for p in response.response_gen if p]
    assert len(pieces) > 5, "the answer streams token by token"

    (start,) = recorder.of(LLMChatStartEvent)
    (end,) = recorder.of(LLMChatEndEvent)
    context = start.messages[-1].content or ""
    assert any(n.node.get_content() in context for n in response.source_nodes), "retrieved text reaches the prompt"
    assert "".join(pieces) == end.response.message.content
    (stats_event,) = recorder.of(MTPStatsEvent)
    assert stats_event.final and stats_event.span_id == start.span_id
    assert stats_event.stats["tokens_emitted"] == 24
    assert stats_event.stats == end.response.additional_kwargs[STATS_KEY]


def llm_dim(path: Path) -> int:
    return Model.load(path).n_embd


# ------------------------------------------------------- tool calling ---


def add(a: int, b: int) -> str:
    """Add two integers."""
    return f"SUM={a + b}"


def test_tool_calls_always_parse_and_feed_back(tiny_paths: dict[str, Path], recorder: Recorder) -> None:
    """A manual loop through the FunctionCallingLLM API: call, run the tool, answer with its result."""
    llm = make_llm(tiny_paths["random"], chat_template=CHATML, n_ctx=2048, max_tokens=200)
    tool = FunctionTool.from_defaults(add)
    response = llm.chat_with_tools([tool], user_msg="What is 2 + 3?", tool_required=True)
    (selection,) = llm.get_tool_calls_from_response(response)
    assert selection.tool_name == "add"
    assert set(selection.tool_kwargs) == {"a", "b"} and all(isinstance(v, int) for v in selection.tool_kwargs.values())
    assert STATS_KEY in response.additional_kwargs
    output = tool(**selection.tool_kwargs)

    history = [
        ChatMessage(role="user", content="What is 2 + 3?"),
        response.message,
        ChatMessage(role="tool", content=output.content, additional_kwargs={"tool_call_id": selection.tool_id}),
    ]
    answer = llm.chat_with_tools([tool], chat_history=history, tool_choice="none", max_tokens=40)
    assert llm.get_tool_calls_from_response(answer, error_on_no_tool_call=False) == []
    # The answer's prompt holds the call's prompt and the call as generated (its token ids ride on the message):
    # all of it comes from the cache (all but the end-of-generation token, sampled and never decoded).
    calling, answering = response.additional_kwargs[STATS_KEY], answer.additional_kwargs[STATS_KEY]
    assert response.additional_kwargs["finish_reason"] == "eog"
    assert answering["prompt_tokens_cached"] == calling["prompt_tokens"] + calling["tokens_emitted"] - 1
    assert not (answer.message.content or "").startswith("{"), "the direct answer is unwrapped from its JSON"
    last_start = recorder.of(LLMChatStartEvent)[-1]
    assert ("tool", output.content) in [(m.role.value, m.content) for m in last_start.messages]
    with pytest.raises(ChatParseError, match="expected at least one tool call, got the answer"):
        llm.get_tool_calls_from_response(answer)


def test_structured_predict_goes_through_the_tool_grammar(tiny_paths: dict[str, Path]) -> None:
    from llama_index.core.prompts import PromptTemplate
    from pydantic import BaseModel

    class Point(BaseModel):
        x: int
        y: int

    llm = make_llm(tiny_paths["random"], chat_template=CHATML, n_ctx=2048, max_tokens=200)
    point = llm.structured_predict(Point, PromptTemplate("A point near {where}."), where="the origin")
    assert isinstance(point, Point), "even an untrained model's output parses and validates"


@pytest.mark.parametrize("which", ["random", "shipped"])
async def test_function_agent_calls_python_tool(tiny_paths: dict[str, Path], recorder: Recorder, which: str) -> None:
    """LlamaIndex's FunctionAgent (workflow agent, streaming) drives MTPLLM offline.

    The tiny random model cannot reason, so the first step forces the tool
    (``initial_tool_choice``) and the tool returns directly: the agent's answer is
    the tool's result, computed from the grammar-constrained arguments.
    """
    calls: list[tuple[int, int]] = []

    def multiply(a: int, b: int) -> str:
        """Multiply two integers."""
        calls.append((a, b))
        return f"PRODUCT={a * b}"

    # "shipped": model_path=None, the built-in default model.
    path = tiny_paths["random"] if which == "random" else None
    llm = make_llm(path, chat_template=CHATML, n_ctx=2048, max_tokens=200)
    tool = FunctionTool.from_defaults(multiply, return_direct=True)
    agent = FunctionAgent(tools=[tool], llm=llm, initial_tool_choice="multiply", system_prompt="Use tools.")
    handler = agent.run("What is 6 times 7?")
    results = [ev async for ev in handler.stream_events() if isinstance(ev, (ToolCallResult, AgentStream))]
    output = await handler
    ((a, b),) = calls
    assert str(output) == f"PRODUCT={a * b}"
    tool_results = [r for r in results if isinstance(r, ToolCallResult)]
    assert [(r.tool_name, r.tool_kwargs) for r in tool_results] == [("multiply", {"a": a, "b": b})]
    (start,) = recorder.of(LLMChatStartEvent)
    assert start.additional_kwargs["tool_choice"] == "multiply"
    (stats_event,) = recorder.of(MTPStatsEvent)
    assert stats_event.final and stats_event.span_id == start.span_id


@pytest.mark.parametrize(
    ("text", "visible"),
    [
        ('{"name": "add"', None),
        ('{"resp', None),
        ('{ "response" :"', ""),
        ('{"response": "ab\\', "ab"),
        ('{"response": "ab\\u00', "ab"),
        ('{"response": "ab\\u00e9\\n', "abé\n"),
        ('{"response": "done"}', "done"),
    ],
)
def test_json_path_streams_only_the_answer(text: str, visible: str | None) -> None:
    from mtp_llm.chat import _partial_response

    assert _partial_response(text) == visible
