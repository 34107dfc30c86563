"""LangChain integration on the real engine and real LangChain (tiny GGUF models, one thread)."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, ToolMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.outputs import ChatGenerationChunk, GenerationChunk, LLMResult
from langchain_core.prompts import ChatPromptTemplate, PromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from langchain_core.tools import tool
from langchain_core.vectorstores import InMemoryVectorStore
from pydantic import BaseModel

import mtp_llm.langchain as lc
from mtp_llm import STATS_KEY, Model
from mtp_llm.langchain import MTPLLM, ChatMTP, MTPEmbeddings, MTPStatsHandler

from tests.helpers import THREADS, LoopTicker
from tests.helpers.langsmith import Recorded, posted_runs

N = 12  # tokens per call on the accept100 model: n_draft=3 -> 3 verify passes of 4 tokens


@pytest.fixture(scope="module")
def paths(tiny_paths: dict[str, Path]) -> dict[str, str]:
    return {name: str(path) for name, path in tiny_paths.items()}


@pytest.fixture()
def llm(paths: dict[str, str]) -> MTPLLM:
    return MTPLLM(model_path=paths["accept100"], n_threads=THREADS, n_ctx=1024, n_draft=3, temperature=0, max_tokens=N)


@pytest.fixture()
def chat(paths: dict[str, str]) -> ChatMTP:
    return ChatMTP(model_path=paths["accept100"], n_threads=THREADS, n_ctx=1024, n_draft=3, temperature=0, max_tokens=N)


class Recorder(BaseCallbackHandler):
    """Records token callbacks, custom events and LLM results."""

    def __init__(self) -> None:
        self.tokens: list[tuple[str, Any]] = []
        self.custom: list[tuple[str, Any]] = []
        self.results: list[LLMResult] = []
        self.prompts: list[Any] = []
        self.model_runs: list[Any] = []
        self.custom_runs: list[Any] = []

    def on_llm_new_token(self, token: str, *, chunk: Any = None, **kwargs: Any) -> None:
        self.tokens.append((token, chunk))

    def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
        self.custom.append((name, data))
        self.custom_runs.append(kwargs.get("run_id"))

    def on_llm_end(self, response: LLMResult, **kwargs: Any) -> None:
        self.results.append(response)

    def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
        self.prompts.append(messages)
        self.model_runs.append(kwargs.get("run_id"))

    def on_llm_start(self, serialized: Any, prompts: Any, **kwargs: Any) -> None:
        self.model_runs.append(kwargs.get("run_id"))


def assert_accept100_stats(stats: dict[str, Any], tokens: int = N) -> None:
    assert stats["acceptance_rate"] == 1.0
    assert stats["drafts_generated"] == stats["drafts_accepted"] == (tokens // 4) * 3
    assert stats["tokens_emitted"] == tokens
    assert stats["iters"] == tokens // 4
    assert stats["mean_accepted_length"] == 4.0
    assert stats["acceptance_rate_per_position"] == [1.0, 1.0, 1.0]
    assert stats["generations"] == 1  # this call's delta, not the session's counters
    assert stats["tokens_per_sec"] > 0 and stats["timing_us"]["total"] > 0
    json.dumps(stats)


# ------------------------------------------------------------ construction --


def test_public_names() -> None:
    assert sorted(lc.__all__) == ["ChatMTP", "MTPEmbeddings", "MTPLLM", "MTPStatsHandler", "STATS_KEY", "StructuredOutputParserError"]
    assert lc.STATS_KEY == STATS_KEY == "mtp_stats"


def test_construction_is_lazy_cheap_and_shared(paths: dict[str, str]) -> None:
    start = time.perf_counter()
    models = [ChatMTP(model_path=paths["accept100"], n_threads=THREADS, n_ctx=1024) for _ in range(2000)]
    assert time.perf_counter() - start < 2.0
    assert all(m._own_session is None for m in models)
    a, b = models[0], MTPLLM(model_path=paths["accept100"], n_threads=THREADS, n_ctx=1024)
    assert a.client is b.client  # same file and load options: one native session
    params = a._identifying_params
    json.dumps(params)
    assert params["model_name"] == "accept100" and len(params) < 12


def test_loaded_model_and_session_are_accepted(accept100_model: Model) -> None:
    from tests.helpers import make_session

    session = make_session(accept100_model, n_draft=3)
    assert MTPLLM(session=session, temperature=0, max_tokens=4).invoke("hi") == "aaaa"
    via_model = MTPLLM(model=accept100_model, n_threads=THREADS, n_ctx=256, temperature=0, max_tokens=4)
    assert via_model.invoke("hi") == "aaaa"
    assert via_model.client.model is accept100_model


# -------------------------------------------------------------- BaseLLM --


def test_llm_invoke_fires_token_callbacks_with_chunks(llm: MTPLLM) -> None:
    rec = Recorder()
    text = llm.invoke("To be", config={"callbacks": [rec]})
    assert text == "a" * N
    assert [t for t, _ in rec.tokens] == ["a"] * N
    for _, chunk in rec.tokens:
        assert isinstance(chunk, GenerationChunk)
        assert isinstance(chunk.generation_info["token_id"], int)


def test_llm_stats_in_llm_output_generation_info_and_stream(llm: MTPLLM) -> None:
    result = llm.generate(["To be"])
    assert_accept100_stats(result.llm_output[STATS_KEY])
    info = result.generations[0][0].generation_info
    assert info["finish_reason"] == "length"
    assert info[STATS_KEY] == result.llm_output[STATS_KEY]

    chunks = list(llm._stream("To be"))
    assert [c.text for c in chunks[:-1]] == ["a"] * N
    assert all(c.generation_info is None for c in chunks[:-1])
    assert_accept100_stats(chunks[-1].generation_info[STATS_KEY])

    rec = Recorder()
    pieces = list(llm.stream("To be", config={"callbacks": [rec]}))
    assert "".join(pieces) == "a" * N
    assert len(rec.tokens) == N  # on_llm_stream for every token
    (streamed,) = rec.results  # the streamed run ends with the stats on the merged chunk
    assert_accept100_stats(streamed.generations[0][0].generation_info[STATS_KEY])


def test_stop_instance_and_per_call(paths: dict[str, str], llm: MTPLLM) -> None:
    stopped = llm.model_copy(update={"stop": ["aaa"]})
    assert stopped.invoke("x") == ""
    assert stopped.invoke("x", stop=["zzz"]) == "a" * N  # per call wins, no error
    chat = ChatMTP(
        model_path=paths["accept100"], n_threads=THREADS, n_ctx=1024, temperature=0, max_tokens=N, stop=["aa"]
    )
    assert chat.invoke("x").content == ""
    assert chat.invoke("x", stop=["q"]).content == "a" * N
    assert "".join(c.text for c in chat.stream("x", stop=["q"])) == "a" * N

    rand = MTPLLM(model_path=paths["random"], n_threads=THREADS, n_ctx=1024, temperature=0, max_tokens=40)
    full = rand.invoke("hello")
    stop = full[10:13]
    cut = rand.invoke("hello", stop=[stop])
    assert stop not in cut and full.startswith(cut) and len(cut) <= 10
    result = rand.generate(["hello"], stop=[stop])
    assert result.generations[0][0].generation_info["finish_reason"] == "stop"


def test_batch(llm: MTPLLM, chat: ChatMTP) -> None:
    assert llm.batch(["a", "b", "c"]) == ["a" * N] * 3
    result = llm.generate(["a", "b", "c"])
    assert len(result.llm_output[STATS_KEY]) == 3
    for gen in result.generations:
        assert_accept100_stats(gen[0].generation_info[STATS_KEY])
    messages = chat.batch(["one", "two", "three"], config={"max_concurrency": 3})
    for m in messages:
        assert m.content == "a" * N
        assert_accept100_stats(m.response_metadata[STATS_KEY])


# ------------------------------------------------------------- ChatMTP --


def test_chat_metadata_invoke_and_stream(chat: ChatMTP) -> None:
    msg = chat.invoke([("system", "Be brief."), ("human", "Hello")])
    assert isinstance(msg, AIMessage) and msg.content == "a" * N
    assert msg.response_metadata["model_name"] == "accept100"
    assert msg.response_metadata["finish_reason"] == "length"
    assert_accept100_stats(msg.response_metadata[STATS_KEY])
    usage = msg.usage_metadata
    assert usage is not None and usage["output_tokens"] == N
    assert usage["input_tokens"] == msg.response_metadata[STATS_KEY]["prompt_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + N

    chunks = list(chat.stream("Hello"))
    assert [c.content for c in chunks[:-1]] == ["a"] * N
    last = chunks[-1]
    assert last.chunk_position == "last"
    assert last.usage_metadata["output_tokens"] == N
    assert_accept100_stats(last.response_metadata[STATS_KEY])
    full = chunks[0]
    for c in chunks[1:]:
        full = full + c
    assert full.usage_metadata["output_tokens"] == N  # only the last chunk carries usage


def test_chat_template_rendering(accept100_model: Model, chat: ChatMTP) -> None:
    from mtp_llm._integration import DEFAULT_CHAT_TEMPLATE

    rec = Recorder()
    custom = chat.model_copy(
        update={"chat_template": "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"}
    )
    custom.invoke("ping", config={"callbacks": [rec]})
    default = accept100_model.apply_chat_template([("user", "ping")], chat_template=DEFAULT_CHAT_TEMPLATE)
    assert accept100_model.chat_template is None  # the tiny model has none: ChatML is used
    # prompt_tokens tell which template rendered the prompt
    custom_tokens = custom.invoke("ping").response_metadata[STATS_KEY]["prompt_tokens"]
    default_tokens = chat.invoke("ping").response_metadata[STATS_KEY]["prompt_tokens"]
    assert default_tokens == len(accept100_model.tokenize(default))
    assert custom_tokens == len(accept100_model.tokenize("[user] ping\n"))


def test_streaming_chain_token_by_token(chat: ChatMTP) -> None:
    chain = (
        ChatPromptTemplate.from_messages([("system", "You are terse."), ("human", "{q}")]) | chat | StrOutputParser()
    )
    pieces = list(chain.stream({"q": "Speak"}))
    assert [p for p in pieces if p] == ["a"] * N
    assert chain.invoke({"q": "Speak"}) == "a" * N


async def test_astream_chain_and_events(chat: ChatMTP, llm: MTPLLM) -> None:
    chain = ChatPromptTemplate.from_messages([("human", "{q}")]) | chat | StrOutputParser()
    pieces = [p async for p in chain.astream({"q": "Speak"})]
    assert "".join(pieces) == "a" * N and len([p for p in pieces if p]) == N

    every = llm.model_copy(update={"emit_stats_every": 4})
    events = [e async for e in every.astream_events("hi", version="v2")]
    custom = [e for e in events if e["event"] == "on_custom_event"]
    assert [e["name"] for e in custom] == [STATS_KEY] * 4
    assert [e["data"]["final"] for e in custom] == [False, False, False, True]
    assert [e["data"]["stats"]["tokens_emitted"] for e in custom] == [4, 8, 12, 12]
    assert len([e for e in events if e["event"] == "on_llm_stream"]) >= N

    events = [e async for e in chain.astream_events({"q": "x"}, version="v2")]
    custom = [e for e in events if e["event"] == "on_custom_event"]
    assert custom and custom[-1]["data"]["final"] is True
    assert_accept100_stats(custom[-1]["data"]["stats"])
    assert len([e for e in events if e["event"] == "on_chat_model_stream"]) >= N


def test_custom_events_and_stats_handler(llm: MTPLLM, chat: ChatMTP) -> None:
    rec = Recorder()
    every = llm.model_copy(update={"emit_stats_every": 4})
    every.invoke("hi", config={"callbacks": [rec]})
    assert [n for n, _ in rec.custom] == [STATS_KEY] * 4
    assert [d["stats"]["tokens_emitted"] for _, d in rec.custom] == [4, 8, 12, 12]
    assert_accept100_stats(rec.custom[-1][1]["stats"])

    handler = MTPStatsHandler()
    chain = (
        PromptTemplate.from_template("{q}") | every | (lambda s: s.upper()) | RunnableLambda(lambda s: chat.invoke(s))
    )
    chain.invoke({"q": "x"}, config={"callbacks": [handler]})
    chat.invoke("y", config={"callbacks": [handler]})
    assert len(handler.calls) == 3
    for stats in handler.calls:
        assert_accept100_stats(stats)
    assert handler.total_tokens == 3 * N and handler.acceptance_rate == 1.0
    assert [p["tokens_emitted"] for p in handler.progress] == [4, 8, 12]

    rec = Recorder()
    chat.invoke("z", config={"callbacks": [rec]})
    assert [n for n, _ in rec.custom] == [STATS_KEY]
    assert len(rec.tokens) == N and isinstance(rec.tokens[0][1], ChatGenerationChunk)


def test_chat_stream_reports_stats(chat: ChatMTP) -> None:
    every = chat.model_copy(update={"emit_stats_every": 6})
    rec = Recorder()
    assert "".join(c.text for c in every.stream("hi", config={"callbacks": [rec]})) == "a" * N
    # LangChain does not hand a chat model's stream its run: the stats come with the result.
    assert rec.custom == []
    (result,) = rec.results
    assert_accept100_stats(result.generations[0][0].message.response_metadata[STATS_KEY])
    rec = Recorder()
    chain = PromptTemplate.from_template("{q}") | every | StrOutputParser()
    assert "".join(chain.stream({"q": "x"}, config={"callbacks": [rec]})) == "a" * N
    # Inside a chain the events go to the enclosing run.
    assert [d["final"] for _, d in rec.custom] == [False, False, True]
    assert len(set(rec.custom_runs)) == 1 and rec.custom_runs[0] not in rec.model_runs


async def test_chat_astream_events(chat: ChatMTP) -> None:
    events = [e async for e in chat.astream_events("hi", version="v2")]
    assert [e for e in events if e["event"] == "on_custom_event"] == []
    (end,) = [e for e in events if e["event"] == "on_chat_model_end"]
    assert_accept100_stats(end["data"]["output"].response_metadata[STATS_KEY])
    chain = PromptTemplate.from_template("{q}") | chat
    events = [e async for e in chain.astream_events({"q": "hi"}, version="v2")]
    (custom,) = [e for e in events if e["event"] == "on_custom_event"]
    assert custom["name"] == STATS_KEY
    assert_accept100_stats(custom["data"]["stats"])
    (end,) = [e for e in events if e["event"] == "on_chat_model_end"]
    assert end["data"]["output"].response_metadata[STATS_KEY] == custom["data"]["stats"]


# ---------------------------------------------------------------- async --


async def test_async_keeps_loop_free_and_cancel_leaves_session_reusable(paths: dict[str, str]) -> None:
    llm = MTPLLM(model_path=paths["random"], n_threads=THREADS, n_ctx=4096, temperature=0, max_tokens=200)
    async with LoopTicker(interval=0.001) as ticker:
        text = await llm.ainvoke("hello")
    assert len(text) > 0 and ticker.ticks >= 10  # the loop kept running while tokens were produced

    long = llm.model_copy(update={"max_tokens": 3000})
    task = asyncio.create_task(long.ainvoke("hello"))
    await asyncio.sleep(0.1)
    start = time.perf_counter()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.perf_counter() - start < 1.0  # the native loop stopped
    assert 0 < long.client.last_stats.tokens_emitted < 3000
    short = llm.model_copy(update={"max_tokens": 8})
    assert short.client is long.client
    assert len(await short.ainvoke("hello")) > 0
    assert short.client.last_stats.tokens_emitted == 8
    assert len(short.invoke("hello")) > 0


async def test_async_concurrency_on_one_model(chat: ChatMTP, llm: MTPLLM) -> None:
    results = await asyncio.gather(*(chat.ainvoke(f"q{i}") for i in range(4)), *(llm.ainvoke("p") for _ in range(3)))
    for msg in results[:4]:
        assert msg.content == "a" * N
        assert_accept100_stats(msg.response_metadata[STATS_KEY])
    assert results[4:] == ["a" * N] * 3
    gen = await llm.agenerate(["x", "y"])
    for g in gen.generations:
        assert_accept100_stats(g[0].generation_info[STATS_KEY])
    streams = await asyncio.gather(*(_collect(chat, i) for i in range(3)))
    assert streams == ["a" * N] * 3


async def _collect(chat: ChatMTP, i: int) -> str:
    return "".join([c.text async for c in chat.astream(f"s{i}")])


# -------------------------------------------------------------------- RAG --


def test_embeddings(paths: dict[str, str], accept100_model: Model) -> None:
    emb = MTPEmbeddings(model_path=paths["accept100"], n_threads=THREADS)
    vectors = emb.embed_documents(["hello", "world"])
    assert len(vectors) == 2 and len(vectors[0]) == accept100_model.n_embd
    assert abs(sum(x * x for x in vectors[0]) - 1.0) < 1e-4
    assert emb.embed_query("hello") == vectors[0]


def test_rag_chain_over_in_memory_retriever(paths: dict[str, str], chat: ChatMTP) -> None:
    docs = ["Paris is the capital of France.", "Bees make honey.", "The Thames flows through London."]
    embeddings = MTPEmbeddings(model_path=paths["accept100"], n_threads=THREADS)
    store = InMemoryVectorStore.from_documents([Document(page_content=d) for d in docs], embeddings)
    retriever = store.as_retriever(search_kwargs={"k": 2})

    def fmt(found: list[Document]) -> str:
        return "\n".join(d.page_content for d in found)

    prompt = ChatPromptTemplate.from_messages([("system", "Context:\n{context}"), ("human", "{question}")])
    chain = {"context": retriever | fmt, "question": RunnablePassthrough()} | prompt | chat | StrOutputParser()
    rec = Recorder()
    handler = MTPStatsHandler()
    assert chain.invoke("What is the capital of France?", config={"callbacks": [rec, handler]}) == "a" * N
    (messages,) = rec.prompts[0]
    system = messages[0].content
    assert sum(d in system for d in docs) == 2
    assert_accept100_stats(handler.calls[-1])
    assert list(chain.stream("Where do bees live?")).count("a") == N


# ------------------------------------------------------------------ tools --


@tool
def get_weather(city: Literal["Paris", "London"]) -> str:
    """Get the current weather in a city."""
    return f"It is sunny in {city}."


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@pytest.fixture()
def tool_chat(paths: dict[str, str]) -> ChatMTP:
    return ChatMTP(model_path=paths["random"], n_threads=THREADS, n_ctx=2048, temperature=0, max_tokens=160)


@pytest.mark.parametrize(
    "choice", [None, "auto", "any", "required", "get_weather", {"type": "function", "function": {"name": "add"}}]
)
def test_tool_calls_always_parse(tool_chat: ChatMTP, choice: Any) -> None:
    bound = tool_chat.bind_tools([get_weather, add], tool_choice=choice)
    msg = bound.invoke("What is the weather in Paris?")
    assert msg.response_metadata["finish_reason"] == "eog"
    if choice is None or choice == "auto":
        assert msg.tool_calls or msg.content
    else:
        assert len(msg.tool_calls) == 1
    for call in msg.tool_calls:
        tool_ = {"get_weather": get_weather, "add": add}[call["name"]]
        tool_.invoke(call["args"])  # arguments validate against the tool's schema
        assert len(call["id"]) == 9 and call["id"].isalnum()  # mtp_llm.chat.new_tool_call_id
    if choice == "get_weather":
        assert msg.tool_calls[0] == {**msg.tool_calls[0], "name": "get_weather", "args": {"city": "Paris"}}
    if isinstance(choice, dict):
        assert msg.tool_calls[0]["name"] == "add"


def test_tool_calls_stream(tool_chat: ChatMTP) -> None:
    bound = tool_chat.bind_tools([get_weather], tool_choice="get_weather")
    chunks = list(bound.stream("Weather?"))
    full: AIMessageChunk = chunks[0]
    for c in chunks[1:]:
        full = full + c
    assert full.tool_calls[0]["name"] == "get_weather" and full.tool_calls[0]["args"] == {"city": "Paris"}
    assert chunks[-1].chunk_position == "last" and full.content == ""
    assert STATS_KEY in full.response_metadata


def test_tool_choice_none_answers_in_text(chat: ChatMTP) -> None:
    msg = chat.bind_tools([get_weather], tool_choice="none").invoke("hi", max_tokens=40)
    # A template without a tool format answers as {"response": "..."}: the opening takes 12 tokens.
    assert msg.content == "a" * 28 and msg.tool_calls == []


def test_bad_tool_choice_raises(chat: ChatMTP) -> None:
    from mtp_llm import InvalidOptionError

    with pytest.raises(InvalidOptionError):
        chat.bind_tools([get_weather], tool_choice="nope")


class Forecast(BaseModel):
    """A weather forecast."""

    city: Literal["Paris", "London"]
    sunny: bool


def test_structured_output(tool_chat: ChatMTP) -> None:
    result = tool_chat.with_structured_output(Forecast).invoke("Forecast for Paris?")
    assert isinstance(result, Forecast)
    raw = tool_chat.with_structured_output(Forecast, include_raw=True).invoke("Forecast?")
    assert raw["parsing_error"] is None and isinstance(raw["parsed"], Forecast)


def test_manual_tool_loop(tool_chat: ChatMTP) -> None:
    messages: list[Any] = [HumanMessage("What is the weather in London?")]
    bound = tool_chat.bind_tools([get_weather], tool_choice="any")
    ai = bound.invoke(messages)
    (call,) = ai.tool_calls
    messages += [ai, get_weather.invoke(call)]
    assert isinstance(messages[-1], ToolMessage)
    final = tool_chat.bind_tools([get_weather], tool_choice="none").invoke(messages)
    assert isinstance(final, AIMessage) and not final.tool_calls
    assert final.response_metadata["finish_reason"] == "eog"  # the answer closed (the random model's is empty)


def _run_agent_with_one_tool_call(chat: ChatMTP) -> None:
    agents = pytest.importorskip("langchain.agents")
    from langchain.agents.middleware import wrap_model_call

    @wrap_model_call
    def tool_then_answer(request: Any, handler: Any) -> Any:
        # Neither test model is instruction-tuned: call a tool first, then answer.
        answered = any(isinstance(m, ToolMessage) for m in request.messages)
        return handler(request.override(tool_choice="none" if answered else "any"))

    agent = agents.create_agent(chat, tools=[get_weather], middleware=[tool_then_answer])
    handler = MTPStatsHandler()
    state = agent.invoke({"messages": [("human", "Weather in Paris?")]}, config={"callbacks": [handler]})
    kinds = [type(m).__name__ for m in state["messages"]]
    assert kinds == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]
    assert state["messages"][1].tool_calls[0]["name"] == "get_weather"
    assert state["messages"][2].content.startswith("It is sunny in")
    assert len(handler.calls) == 2
    # The answering call's prompt extends the calling call's ("none" keeps the tools in it) and its call,
    # put back as the tokens it was generated with: all of that comes from the prompt cache (all but the
    # end-of-generation token, sampled and never decoded).
    calling, answering = handler.calls
    assert answering["prompt_tokens_cached"] == calling["prompt_tokens"] + calling["tokens_emitted"] - 1
    assert state["messages"][3].usage_metadata["input_token_details"]["cache_read"] > 0


def test_create_agent_completes_with_a_tool_call(tool_chat: ChatMTP) -> None:
    _run_agent_with_one_tool_call(tool_chat.model_copy(update={"max_tokens": 80}))


def test_create_agent_on_the_shipped_model() -> None:
    # model_path=None: the built-in default model shipped with the package.
    _run_agent_with_one_tool_call(ChatMTP(n_threads=THREADS, n_ctx=2048, temperature=0, max_tokens=80))


# -------------------------------------------------------------- LangSmith --


@pytest.fixture()
def langsmith_server() -> Iterator[tuple[str, type[Recorded]]]:
    handler = type("Handler", (Recorded,), {"requests": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def _stats_in_outputs(outputs: dict[str, Any]) -> dict[str, Any]:
    """Where a trace's LLM run outputs hold the stats (and the chat message's token usage)."""
    generation = outputs["generations"][0][0]
    found = {"generation_info": (generation.get("generation_info") or {}).get(STATS_KEY)}
    if outputs.get("llm_output"):
        found["llm_output"] = outputs["llm_output"].get(STATS_KEY)
    if "message" in generation:
        message = generation["message"]["kwargs"]
        found["response_metadata"] = message["response_metadata"][STATS_KEY]
        found["usage_metadata"] = message["usage_metadata"]
    return found


@pytest.mark.parametrize("kind", ["llm", "chat", "chat-stream"])
def test_trace_stats_alike_in_langsmith_and_collect_runs(
    langsmith_server: tuple[str, type[Recorded]], llm: MTPLLM, chat: ChatMTP, kind: str
) -> None:
    from langchain_core.tracers.context import collect_runs
    from langchain_core.tracers.langchain import LangChainTracer
    from langsmith import Client

    url, handler = langsmith_server
    client = Client(api_url=url, api_key="test-key", auto_batch_tracing=True)
    tracer = LangChainTracer(client=client, project_name="mtp-llm-tests")
    chain = PromptTemplate.from_template("{q}") | (llm if kind == "llm" else chat)

    def run(callbacks: list[Any]) -> None:
        if kind == "chat-stream":
            assert "".join(c.text for c in chain.stream({"q": "hello"}, config={"callbacks": callbacks})) == "a" * N
        else:
            chain.invoke({"q": "hello"}, config={"callbacks": callbacks})

    run([tracer])
    tracer.wait_for_futures()
    client.flush()
    (posted,) = [r for r in posted_runs(handler.requests).values() if r.get("run_type") == "llm"]
    with collect_runs() as collector:
        run([])
    (collected,) = [r for r in collector.traced_runs[0].child_runs if r.run_type == "llm"]

    in_langsmith = _stats_in_outputs(posted["outputs"])
    in_collected = _stats_in_outputs(collected.outputs or {})
    assert set(in_langsmith) == set(in_collected)
    assert set(in_langsmith) >= ({"generation_info"} if kind == "chat-stream" else {"llm_output", "generation_info"})
    for where, stats in [*in_langsmith.items(), *in_collected.items()]:
        if where == "usage_metadata":
            assert stats["output_tokens"] == N and stats["input_tokens"] > 0
        else:
            assert_accept100_stats(stats)
    for metadata in (posted["extra"]["metadata"], (collected.extra or {})["metadata"]):
        assert metadata["ls_provider"] == "mtp_llm" and metadata["ls_model_name"] == "accept100"


_ENV_TRACING_SCRIPT = """
import http.server, json, os, sys, threading
sys.path.insert(0, sys.argv[1])
from tests.helpers.langsmith import Recorded, posted_runs
handler = type("Handler", (Recorded,), {"requests": []})
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
os.environ.update(LANGSMITH_TRACING="true", LANGSMITH_API_KEY="test-key", LANGSMITH_PROJECT="mtp-llm-tests",
                  LANGSMITH_ENDPOINT="http://127.0.0.1:%d" % server.server_address[1])
from langchain_core.tracers.langchain import wait_for_all_tracers
from langsmith import Client
from mtp_llm.langchain import ChatMTP
chat = ChatMTP(model_path=sys.argv[2], n_threads=1, n_ctx=1024, n_draft=3, temperature=0, max_tokens=12)
text = "".join(c.text for c in chat.stream("hello"))
wait_for_all_tracers()
import langchain_core.tracers.langchain as lt
lt.get_client().flush()
runs = [r for r in posted_runs(handler.requests).values() if r.get("run_type") == "llm"]
print(json.dumps({"text": text, "outputs": [r["outputs"] for r in runs]}))
"""


def test_langsmith_env_tracing_top_level_chat_stream(paths: dict[str, str]) -> None:
    """Tracing switched on by environment variables, the model streamed on its own."""
    import subprocess
    import sys

    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_"))}
    out = subprocess.run(
        [sys.executable, "-c", _ENV_TRACING_SCRIPT, str(Path(__file__).resolve().parents[2]), paths["accept100"]],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["text"] == "a" * N
    (outputs,) = result["outputs"]
    stats = _stats_in_outputs(outputs)
    assert_accept100_stats(stats["response_metadata"])
    assert stats["usage_metadata"]["output_tokens"] == N
