"""LangChain integration: :class:`MTPLLM` (a ``BaseLLM``) and :class:`ChatMTP` (a ``BaseChatModel``).

Both run llama.cpp's native MTP speculative decoding through one shared
session per model file and load options (loaded lazily on first use, so
constructing a model is cheap), stream token by token through LangChain's
callbacks, and publish the speculative-decoding stats of every call:

* on the final chunk's ``generation_info`` (``MTPLLM``) / the message's
  ``response_metadata`` (``ChatMTP``), and in ``LLMResult.llm_output`` for
  non-streamed calls, under :data:`~mtp_llm.stats.STATS_KEY` (``"mtp_stats"``);
  so every tracer (LangSmith, ``collect_runs``, a custom ``BaseTracer``) finds them in the
  LLM run's outputs, and a chat message's ``usage_metadata`` counts the tokens;
* as an ``on_custom_event`` named ``"mtp_stats"`` (data: ``{"stats": {...},
  "final": bool}``), at the end of each call and every ``emit_stats_every``
  tokens, to the LLM run (a chat model's ``stream``: to the enclosing chain), visible to
  handlers and in ``astream_events(version="v2")``;
* to :class:`MTPStatsHandler`, which collects the stats of every call in a chain.

Setup:
    ``pip install "mtp-llm[langchain]"``

Instantiate:
    ```python
    from mtp_llm.langchain import ChatMTP

    chat = ChatMTP(model_path="model.gguf", n_draft=3, temperature=0, max_tokens=64)
    ```

Invoke / stream:
    ```python
    msg = chat.invoke("Who are you?")
    msg.response_metadata["mtp_stats"]["acceptance_rate"]
    for chunk in chat.stream("Tell me a story"):
        print(chunk.text, end="")
    ```

Tool calling:
    ```python
    chat.bind_tools([get_weather], tool_choice="any").invoke("Weather in Paris?").tool_calls
    ```
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from operator import itemgetter
from typing import Any, Literal

from langchain_core.callbacks import (
    AsyncCallbackManager,
    AsyncCallbackManagerForLLMRun,
    BaseCallbackHandler,
    CallbackManager,
    CallbackManagerForLLMRun,
)
from langchain_core.callbacks.manager import adispatch_custom_event, dispatch_custom_event
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel, BaseLLM, LanguageModelInput
from langchain_core.language_models.chat_models import generate_from_stream
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.tool import ToolCallChunk, tool_call_chunk
from langchain_core.outputs import (
    ChatGeneration,
    ChatGenerationChunk,
    ChatResult,
    Generation,
    GenerationChunk,
    LLMResult,
)
from langchain_core.exceptions import OutputParserException
from langchain_core.runnables import Runnable, RunnableLambda, RunnableMap, RunnablePassthrough
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_json_schema, convert_to_openai_tool
from langchain_core.utils.pydantic import is_basemodel_subclass
from pydantic import Field

from ._derived import ChatFields, EmbeddingFields, LLMFields
from ._integration import (
    TOKEN_IDS_KEY,
    answer_ids,
    answer_token_ids,
    chat_prompt_tokens,
    chat_turn,
    json_object,
    logprob_entry,
    openai_message,
    parse_structured,
    stats_payload,
)
from .chat import ChatDelta, ChatTurn, ToolCall, json_schema_grammar, normalize_tool_choice
from .errors import InvalidOptionError, StructuredOutputError
from .events import DoneEvent, Event, StatsEvent, TokenEvent
from .options import GenerationOptions
from .model import Model
from .session import MTP
from .stats import STATS_KEY, MTPStats

__all__ = ["MTPLLM", "STATS_KEY", "ChatMTP", "MTPEmbeddings", "MTPStatsHandler", "StructuredOutputParserError"]

_PROVIDER = "mtp_llm"
# Keyword arguments LangChain passes through to the model that are not generation options.
_LC_KWARGS = (
    "tools", "tool_choice", "ls_structured_output_format", "stream", "parallel_tool_calls", "enable_thinking",
    "reasoning_effort",
)


# ------------------------------------------------------------- shared core --


class _MTPParams(LLMFields):
    """Engine and generation fields shared by :class:`MTPLLM` and :class:`ChatMTP`: every
    :class:`~mtp_llm.SessionOptions` field, every :class:`~mtp_llm.GenerationOptions` field as an
    instance default (``temperature`` for ``temp``; None = that class's default) and where the
    model comes from (``model_path``, ``repo_id``/``filename``/``revision``, ``draft_model_path``,
    ``n_gpu_layers``, ``use_mmap``, ``rpc_servers``), all derived from those declarations
    (:mod:`mtp_llm._fields`); plus ``model``, ``model_name`` and ``session``."""

    session: MTP | None = Field(default=None, exclude=True)
    """An existing :class:`mtp_llm.MTP` session to run on (overrides ``model_path``,
    ``model`` and the load options)."""

    # -- engine

    @property
    def client(self) -> MTP:
        """The native session, loaded on first use."""
        return self._engine()

    def _given_session(self) -> MTP | None:
        return self.session

    def _lc_call_options(self, stop: Sequence[str] | None, kwargs: Mapping[str, Any]) -> GenerationOptions:
        """Instance options, overridden by per-call ones (a per-call ``stop`` wins)."""
        return self._call_options({k: v for k, v in kwargs.items() if k not in _LC_KWARGS}, stop)

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> Any:
        """LangSmith's standard parameters (recorded in the run's metadata)."""
        params = super()._get_ls_params(stop=stop, **kwargs)  # type: ignore[misc]
        model = kwargs.get("model")
        params["ls_provider"] = _PROVIDER
        params["ls_model_name"] = model if isinstance(model, str) else self._display_name()
        temperature = kwargs.get("temperature", kwargs.get("temp", self.temperature))
        if temperature is not None:
            params["ls_temperature"] = temperature
        max_tokens = kwargs.get("max_tokens", self.max_tokens)
        if max_tokens is not None:
            params["ls_max_tokens"] = max_tokens
        if stop or self.stop:
            params["ls_stop"] = list(stop or self.stop or [])
        return params

    def get_token_ids(self, text: str) -> list[int]:
        """The model's own token ids of ``text`` (no BOS; ``<|...|>`` markers as special tokens, as
        in a prompt), unless ``custom_get_token_ids`` is set. ``get_num_tokens`` counts them."""
        custom: Callable[[str], list[int]] | None = getattr(self, "custom_get_token_ids", None)
        if custom is not None:
            return custom(text)
        return self.client.model.tokenize(text, add_special=False)

    @property
    def _identifying_params(self) -> dict[str, Any]:
        """Small, JSON-safe identifying parameters (no native handles)."""
        params: dict[str, Any] = {
            "model_name": self._display_name(),
            "n_draft": self.n_draft,
            "n_draft_max": self.n_draft_max,
            "n_ctx": self.n_ctx,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_k": self.top_k,
            "top_p": self.top_p,
            "seed": self.seed,
            "stop": self.stop,
        }
        return {k: v for k, v in params.items() if v is not None}


class _Chunker:
    """Turns engine events into LangChain chunks (one subclass per model type)."""

    def token(self, event: TokenEvent) -> Any:
        raise NotImplementedError

    def done(self, event: DoneEvent) -> Any:
        raise NotImplementedError


RunManager = CallbackManagerForLLMRun | AsyncCallbackManagerForLLMRun


def _stats_event(stats: MTPStats, final: bool) -> dict[str, Any]:
    return {"stats": stats_payload(stats), "final": final}


def _run_events(run_manager: RunManager, manager_cls: type[Any]) -> Any:
    """A callback manager whose custom events belong to the LLM run of ``run_manager``."""
    return manager_cls(
        handlers=run_manager.handlers,
        inheritable_handlers=run_manager.inheritable_handlers,
        parent_run_id=run_manager.run_id,
        tags=run_manager.tags,
        metadata=run_manager.metadata,
    )


def _report(run_manager: CallbackManagerForLLMRun | None, stats: MTPStats, final: bool) -> None:
    """The ``mtp_stats`` custom event, to the call's LLM run; a chat model's streamed call is not
    handed its run, so there the event goes to the enclosing run (a chain), if any."""
    data = _stats_event(stats, final)
    if run_manager is not None:
        _run_events(run_manager, CallbackManager).on_custom_event(STATS_KEY, data, run_id=run_manager.run_id)
        return
    with contextlib.suppress(RuntimeError):  # no enclosing run
        dispatch_custom_event(STATS_KEY, data)


async def _areport(run_manager: AsyncCallbackManagerForLLMRun | None, stats: MTPStats, final: bool) -> None:
    """Async :func:`_report`."""
    data = _stats_event(stats, final)
    if run_manager is not None:
        manager = _run_events(run_manager, AsyncCallbackManager)
        await manager.on_custom_event(STATS_KEY, data, run_id=run_manager.run_id)
        return
    with contextlib.suppress(RuntimeError):
        await adispatch_custom_event(STATS_KEY, data)


def _drive(
    events: Iterator[Event],
    chunker: _Chunker,
    run_manager: CallbackManagerForLLMRun | None,
    token_callback: CallbackManagerForLLMRun | None,
) -> Iterator[Any]:
    """The sync path: engine events -> chunks, token callbacks, stats events
    (dispatch on the exact event type: the per-token branch comes first)."""
    for event in events:
        kind = type(event)
        if kind is TokenEvent:
            chunk = chunker.token(event)  # type: ignore[arg-type]
            if token_callback is not None:
                token_callback.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk
        elif kind is StatsEvent:
            _report(run_manager, event.stats, final=False)  # type: ignore[union-attr]
        elif kind is DoneEvent:
            _report(run_manager, event.stats, final=True)  # type: ignore[union-attr]
            yield chunker.done(event)  # type: ignore[arg-type]


async def _adrive(
    events: AsyncIterator[Event],
    chunker: _Chunker,
    run_manager: AsyncCallbackManagerForLLMRun | None,
    token_callback: AsyncCallbackManagerForLLMRun | None,
) -> AsyncIterator[Any]:
    """The async path: the same translation as :func:`_drive` over ``MTP.astream_events``."""
    async for event in events:
        kind = type(event)
        if kind is TokenEvent:
            chunk = chunker.token(event)  # type: ignore[arg-type]
            if token_callback is not None:
                await token_callback.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk
        elif kind is StatsEvent:
            await _areport(run_manager, event.stats, final=False)  # type: ignore[union-attr]
        elif kind is DoneEvent:
            await _areport(run_manager, event.stats, final=True)  # type: ignore[union-attr]
            yield chunker.done(event)  # type: ignore[arg-type]


# ------------------------------------------------------------------ MTPLLM --


class StructuredOutputParserError(StructuredOutputError, OutputParserException):
    """:class:`~mtp_llm.StructuredOutputError` that LangChain's parsers and retry wrappers also
    catch as an ``OutputParserException`` (``llm_output`` is the raw answer)."""

    def __init__(
        self, message: str, *, text: str = "", finish_reason: str | None = None, stats: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message, text=text, finish_reason=finish_reason, stats=stats)
        self.llm_output = text


def _structured_parser(schema: dict[str, Any] | type, method: str) -> Callable[[BaseMessage], Any]:
    """What ``with_structured_output`` turns the answer into: an instance of a pydantic ``schema``,
    else the JSON object; a cut or mismatching answer raises :class:`StructuredOutputParserError`."""
    if isinstance(schema, type) and is_basemodel_subclass(schema):
        validate = getattr(schema, "model_validate", None) or getattr(schema, "parse_obj")
        what = schema.__name__
    else:
        validate, what = json_object, "a JSON object"
    fix = 'use method="json_schema" (the default), whose grammar enforces the schema' if method == "json_mode" else ""

    def parse(message: BaseMessage) -> Any:
        metadata = message.response_metadata
        return parse_structured(
            message.text,
            validate,
            what,
            finish_reason=metadata.get("finish_reason"),
            stats=metadata.get(STATS_KEY),
            fix=fix,
            error=StructuredOutputParserError,
        )

    return parse


class _TextChunker(_Chunker):
    def __init__(self, model: Model) -> None:
        self.model = model

    def token(self, event: TokenEvent) -> GenerationChunk:
        info: dict[str, Any] = {"token_id": event.id}
        if event.logprob is not None:
            info["logprobs"] = {"content": [logprob_entry(self.model, event)]}
        return GenerationChunk(text=event.text, generation_info=info)

    def done(self, event: DoneEvent) -> GenerationChunk:
        return GenerationChunk(
            text="", generation_info={"finish_reason": event.finish_reason, STATS_KEY: stats_payload(event.stats)}
        )


class MTPLLM(_MTPParams, BaseLLM):
    """Text completion with llama.cpp's native MTP speculative decoding.

    Setup:
        ``pip install "mtp-llm[langchain]"``

    Instantiate:
        ```python
        from mtp_llm.langchain import MTPLLM

        llm = MTPLLM(model_path="model.gguf", n_draft=3, temperature=0, max_tokens=64, stop=["\\n\\n"])
        ```

    Invoke:
        ```python
        result = llm.generate(["To be, or not to be"])
        result.llm_output["mtp_stats"]["acceptance_rate"]      # e.g. 0.71
        result.generations[0][0].generation_info["mtp_stats"]  # the same, per prompt
        ```

    Stream:
        ```python
        for piece in llm.stream("To be, or not to be", stop=["."]):
            print(piece, end="")
        ```

    Async:
        ```python
        text = await llm.ainvoke("To be")       # the event loop stays free
        async for piece in llm.astream("To be"):
            ...
        ```

    Every token fires ``on_llm_new_token(text, chunk=GenerationChunk(text,
    generation_info={"token_id": id}))``, on ``invoke`` too. Streamed chunks carry
    no per-token ``generation_info`` (LangChain would add the ids up); the final
    chunk carries ``{"finish_reason", "mtp_stats"}``. ``llm_output["mtp_stats"]`` is
    the call's stats dict for one prompt, or a list (one per prompt) for several.
    """

    @property
    def _llm_type(self) -> str:
        return "mtp_llm"

    def _stream(
        self,
        prompt: str,
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[GenerationChunk]:
        options = self._lc_call_options(stop, kwargs)
        events = self.client.stream_events(prompt, options=options)
        for chunk in _drive(events, _TextChunker(self.client.model), run_manager, run_manager):
            if (kept := _mergeable(chunk)) is not None:
                yield kept

    async def _astream(
        self,
        prompt: str,
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[GenerationChunk]:
        options = self._lc_call_options(stop, kwargs)
        events = self.client.astream_events(prompt, options=options)
        async for chunk in _adrive(events, _TextChunker(self.client.model), run_manager, run_manager):
            if (kept := _mergeable(chunk)) is not None:
                yield kept

    def _generate(
        self,
        prompts: list[str],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> LLMResult:
        def one(prompt: str) -> list[GenerationChunk]:
            return list(self._stream(prompt, stop, run_manager, **kwargs))

        workers = min(len(prompts), self.client.n_parallel)
        if workers <= 1:
            return _llm_result([one(p) for p in prompts])
        # ``batch`` hands every prompt to one call: run them in the session's slots at once.
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mtp_llm") as pool:
            return _llm_result(list(pool.map(one, prompts)))

    async def _agenerate(
        self,
        prompts: list[str],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> LLMResult:
        async def one(prompt: str) -> list[GenerationChunk]:
            return [c async for c in self._astream(prompt, stop, run_manager, **kwargs)]

        # The session admits n_parallel of them at once; the others await a slot.
        return _llm_result(list(await asyncio.gather(*(one(p) for p in prompts))))


def _mergeable(chunk: GenerationChunk) -> GenerationChunk | None:
    """Drop the per-token id once the callback has seen it (LangChain sums ints when it
    merges chunks, so only the final chunk keeps its ``generation_info``), and skip the
    empty pieces of held-back tokens (a split character, a possible stop string); a token's
    ``logprobs`` stay (their lists join when chunks merge)."""
    info = chunk.generation_info
    if info is not None and STATS_KEY in info:
        return chunk
    if info is not None and "logprobs" in info:
        return GenerationChunk(text=chunk.text, generation_info={"logprobs": info["logprobs"]})
    return GenerationChunk(text=chunk.text) if chunk.text else None


def _llm_result(per_prompt: list[list[GenerationChunk]]) -> LLMResult:
    generations = []
    payloads = []
    for chunks in per_prompt:
        info = chunks[-1].generation_info if chunks else None
        content = [e for c in chunks for e in ((c.generation_info or {}).get("logprobs") or {}).get("content", [])]
        if content:
            info = {**(info or {}), "logprobs": {"content": content}}
        generations.append([Generation(text="".join(c.text for c in chunks), generation_info=info)])
        payloads.append((info or {}).get(STATS_KEY))
    return LLMResult(generations=generations, llm_output={STATS_KEY: payloads[0] if len(payloads) == 1 else payloads})


# ----------------------------------------------------------------- ChatMTP --


def _answers(messages: Sequence[BaseMessage]) -> list[list[int]]:
    """The token ids earlier answers of this model were written with (``response_metadata``)."""
    return [ids for m in messages if isinstance(m, AIMessage) and (ids := answer_ids(m.response_metadata))]


def _openai_messages(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """LangChain messages as OpenAI chat messages (what the chat layer renders)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        text = message.text if isinstance(message.text, str) else str(message.content)
        if isinstance(message, AIMessage):
            reasoning = message.additional_kwargs.get("reasoning_content")
            calls = [ToolCall(c.get("id") or "", c["name"], c["args"]) for c in message.tool_calls]
            out.append(
                openai_message(
                    "assistant", text, tool_calls=calls, reasoning=reasoning if isinstance(reasoning, str) else ""
                )
            )
        elif isinstance(message, ToolMessage):
            out.append(openai_message("tool", text, tool_call_id=message.tool_call_id, name=message.name))
        elif isinstance(message, SystemMessage):
            out.append(openai_message("system", text))
        elif isinstance(message, ChatMessage):
            out.append(openai_message(message.role, text))
        else:
            out.append(openai_message("user", text))  # HumanMessage and anything else
    return out


class _ChatChunker(_Chunker):
    """Chat chunks from a :class:`~mtp_llm.chat.ChatTurn`: content and reasoning stream as
    they parse, tool calls as ``tool_call_chunks``."""

    def __init__(self, model_name: str, turn: ChatTurn, model: Model) -> None:
        self.model_name = model_name
        self.turn = turn
        self.model = model
        self.ids: list[int] = []

    def token(self, event: TokenEvent) -> ChatGenerationChunk:
        self.ids.append(event.id)
        if event.logprob is None:
            return ChatGenerationChunk(message=_message_chunk(self.turn.feed(event.text)))
        logprobs = {"logprobs": {"content": [logprob_entry(self.model, event)]}}
        return ChatGenerationChunk(message=_message_chunk(self.turn.feed(event.text), response_metadata=logprobs))

    def done(self, event: DoneEvent) -> ChatGenerationChunk:
        stats = event.stats
        message = _message_chunk(
            self.turn.finish(event.finish_reason).delta,
            usage_metadata={
                "input_tokens": stats.prompt_tokens,
                "output_tokens": stats.tokens_emitted,
                "total_tokens": stats.prompt_tokens + stats.tokens_emitted,
                "input_token_details": {"cache_read": stats.prompt_tokens_cached},
            },
            chunk_position="last",
        )
        info = {
            "finish_reason": event.finish_reason,
            "model_name": self.model_name,
            STATS_KEY: stats_payload(stats),
            TOKEN_IDS_KEY: answer_token_ids(self.ids, event.finish_reason),
        }
        return ChatGenerationChunk(message=message, generation_info=info)


def _message_chunk(delta: ChatDelta, **fields: Any) -> AIMessageChunk:
    calls: list[ToolCallChunk] = [
        tool_call_chunk(name=c.name, args=c.arguments, id=c.id, index=c.index) for c in delta.tool_calls
    ]
    extra = {"reasoning_content": delta.reasoning} if delta.reasoning else {}
    return AIMessageChunk(content=delta.content, additional_kwargs=extra, tool_call_chunks=calls, **fields)


class ChatMTP(ChatFields, _MTPParams, BaseChatModel):
    """Chat with llama.cpp's native MTP speculative decoding.

    Setup:
        ``pip install "mtp-llm[langchain]"``

    Instantiate:
        ```python
        from mtp_llm.langchain import ChatMTP

        chat = ChatMTP(model_path="model.gguf", n_draft=3, temperature=0, max_tokens=128)
        ```

    Invoke:
        ```python
        msg = chat.invoke([("system", "Be brief."), ("human", "Hello")])
        msg.usage_metadata                             # {'input_tokens': .., 'output_tokens': .., ...}
        msg.response_metadata["mtp_stats"]["acceptance_rate"]
        ```

    Stream:
        ```python
        for chunk in chat.stream("Hello"):
            print(chunk.text, end="")                  # the last chunk has chunk_position="last"
        ```

    Async:
        ```python
        msg = await chat.ainvoke("Hello")              # the event loop stays free
        ```

    Tool calling:
        ```python
        chat.bind_tools([get_weather], tool_choice="any").invoke("Weather in Paris?").tool_calls
        chat.with_structured_output(Answer).invoke("...")
        ```

    Messages, tools, tool calls and reasoning go through llama.cpp's chat layer in
    the model's own format (``chat_template``, else the GGUF's template, else
    ChatML): calls are generated under the format's tool-call grammar and parsed
    into ``tool_calls`` (``tool_call_chunks`` while streaming), reasoning into
    ``additional_kwargs["reasoning_content"]``. Templates without a tool-call format
    use JSON calls under a grammar built from the tools' schemas (see
    :mod:`mtp_llm.chat`).
    """

    streaming: bool = False
    """Let ``invoke`` run through the streaming path (tokens reach callbacks either way)."""

    @property
    def _llm_type(self) -> str:
        return "mtp_llm-chat"

    def bind_tools(
        self,
        tools: Sequence[Mapping[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: dict[str, Any] | str | bool | None = None,
        strict: bool | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools; calls are produced under a grammar built from their JSON schemas.

        Args:
            tools: LangChain tools, functions, pydantic models, TypedDicts or OpenAI tool dicts.
            tool_choice: "auto" (default: call a tool or answer), "any"/"required"/True
                (must call a tool), "none" (plain answer), or a tool name / OpenAI-style
                ``{"type": "function", "function": {"name": ...}}`` (must call that tool).
            strict: accepted for OpenAI compatibility: arguments always follow the tools'
                schemas here (the grammar enforces them; docs/chat.md lists the few formats
                whose string values stay free text), so it changes nothing.
            **kwargs: further per-call options bound with the tools.

        Returns:
            The model bound to the tools.
        """
        formatted = [convert_to_openai_tool(t, strict=strict) for t in tools]
        normalize_tool_choice(tool_choice, [str(t["function"]["name"]) for t in formatted])  # fail early
        return super().bind(tools=formatted, tool_choice=tool_choice, **kwargs)

    def with_structured_output(
        self,
        schema: dict[str, Any] | type,
        *,
        method: Literal["json_schema", "function_calling", "json_mode"] = "json_schema",
        include_raw: bool = False,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, Any]:
        """Answers as data matching ``schema`` (a pydantic model, TypedDict, JSON schema or tool).

        Args:
            schema: What the answer must match; a pydantic model gives instances of it, anything
                else a dict.
            method: "json_schema" (default): the answer is generated under a grammar built from
                the schema (compact JSON: keys and punctuation are drafted from the grammar, see
                ``grammar_drafts``), so it always parses and matches it. "function_calling": the
                schema as a forced tool call (``bind_tools(..., tool_choice="any")``).
                "json_mode": any JSON object.
            include_raw: Return ``{"raw": AIMessage, "parsed": ..., "parsing_error": ...}``.
            **kwargs: For "function_calling", passed on to LangChain's implementation.

        Returns:
            A runnable giving the parsed answer.
        """
        if method == "function_calling":
            return super().with_structured_output(schema, include_raw=include_raw, **kwargs)
        if method not in ("json_schema", "json_mode"):
            raise InvalidOptionError(f'method must be "json_schema", "function_calling" or "json_mode" (got {method!r})')
        json_schema = convert_to_json_schema(schema) if method == "json_schema" else {"type": "object"}
        llm = self.bind(
            grammar=json_schema_grammar(json_schema),
            ls_structured_output_format={"kwargs": {"method": method}, "schema": json_schema},
        )
        parser = RunnableLambda(_structured_parser(schema, method), name="MTPStructuredOutputParser")
        if not include_raw:
            return llm | parser
        parsed = RunnablePassthrough.assign(parsed=itemgetter("raw") | parser, parsing_error=lambda _: None)
        failed = RunnablePassthrough.assign(parsed=lambda _: None)
        return RunnableMap(raw=llm) | parsed.with_fallbacks([failed], exception_key="parsing_error")

    def get_num_tokens_from_messages(self, messages: list[BaseMessage], tools: Sequence[Any] | None = None) -> int:
        """Tokens of the prompt ``messages`` (and ``tools``) make: rendered with the model's chat
        template and tokenized as a call would (the count a call reports as ``input_tokens``);
        ``trim_messages(token_counter=chat)`` counts with it."""
        if not messages:
            return 0
        prompt, _, _ = self._prepare(messages, None, {"tools": [convert_to_openai_tool(t) for t in tools or ()]})
        return len(self.client.tokenize_prompt(prompt))

    def _prepare(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any]
    ) -> tuple[str | list[int], GenerationOptions, _ChatChunker]:
        turn = chat_turn(
            self.client,
            self.chat_template,
            _openai_messages(messages),
            tools=kwargs.get("tools") or [],
            tool_choice=kwargs.get("tool_choice"),
            parallel_tool_calls=bool(kwargs.get("parallel_tool_calls", False)),
            enable_thinking=bool(kwargs.get("enable_thinking", self.enable_thinking)),
            reasoning_effort=kwargs.get("reasoning_effort", self.reasoning_effort),
        )
        prompt = chat_prompt_tokens(self.client, turn.prompt, _answers(messages))
        return prompt, turn.options(self._lc_call_options(stop, kwargs)), _ChatChunker(self._display_name(), turn, self.client.model)

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        prompt, options, chunker = self._prepare(messages, stop, kwargs)
        # LangChain fires the token callbacks of a chat model's stream itself.
        yield from _drive(self.client.stream_events(prompt, options=options), chunker, run_manager, None)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        prompt, options, chunker = self._prepare(messages, stop, kwargs)
        async for chunk in _adrive(self.client.astream_events(prompt, options=options), chunker, run_manager, None):
            yield chunk

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        prompt, options, chunker = self._prepare(messages, stop, kwargs)
        chunks = list(_drive(self.client.stream_events(prompt, options=options), chunker, run_manager, run_manager))
        return _chat_result(chunks)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        prompt, options, chunker = self._prepare(messages, stop, kwargs)
        events = self.client.astream_events(prompt, options=options)
        return _chat_result([c async for c in _adrive(events, chunker, run_manager, run_manager)])


def _chat_result(chunks: list[ChatGenerationChunk]) -> ChatResult:
    result = generate_from_stream(iter(chunks))
    generation = result.generations[0]
    message = generation.message
    info = dict(generation.generation_info or {})
    message.response_metadata = {**message.response_metadata, **info}
    if isinstance(message, AIMessage):
        message.chunk_position = None  # type: ignore[attr-defined]
    return ChatResult(
        generations=[ChatGeneration(message=message, generation_info=info)],
        llm_output={STATS_KEY: info.get(STATS_KEY), "model_name": info.get("model_name")},
    )


# ------------------------------------------------------------- embeddings --


class MTPEmbeddings(EmbeddingFields, Embeddings):
    """Local embeddings from a GGUF model's own hidden states (mean-pooled, L2-normalised),
    computed by llama.cpp: retrieval without a second model or a network.

    Shares the loaded weights with :class:`ChatMTP` / :class:`MTPLLM` on the same file. Fields:
    ``model_path``, ``n_threads``, ``n_gpu_layers`` (the same as LlamaIndex's ``MTPEmbedding``).

    ```python
    from langchain_core.vectorstores import InMemoryVectorStore

    store = InMemoryVectorStore.from_texts(["Bees make honey."], MTPEmbeddings())
    ```
    """

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed texts (one vector per text)."""
        return self._embed(texts)

    def embed_query(self, text: str) -> list[float]:
        """Embed one query text."""
        return self.embed_documents([text])[0]


# ---------------------------------------------------------------- handler --


class MTPStatsHandler(BaseCallbackHandler):
    """Collects the speculative-decoding stats of every MTPLLM / ChatMTP call it sees.

    ```python
    handler = MTPStatsHandler()
    chain.invoke({"topic": "bees"}, config={"callbacks": [handler]})
    handler.calls[-1]["acceptance_rate"]
    handler.progress   # interim stats (emit_stats_every), latest first call
    ```

    Attributes:
        calls: the final stats dict of every finished call, in completion order.
        progress: every interim ``mtp_stats`` event's stats, in arrival order.
    """

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[dict[str, Any]] = []
        self.progress: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def on_llm_end(self, response: LLMResult, **kwargs: Any) -> None:
        for generations in response.generations:
            for generation in generations:
                payload = (generation.generation_info or {}).get(STATS_KEY)
                if payload is None and isinstance(generation, ChatGeneration):
                    payload = generation.message.response_metadata.get(STATS_KEY)
                if isinstance(payload, dict):
                    with self._lock:
                        self.calls.append(payload)

    def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
        if name == STATS_KEY and isinstance(data, dict) and not data.get("final"):
            with self._lock:
                self.progress.append(data["stats"])

    @property
    def total_tokens(self) -> int:
        """Tokens emitted over every collected call."""
        return sum(int(c["tokens_emitted"]) for c in self.calls)

    @property
    def acceptance_rate(self) -> float:
        """Accepted / generated drafts over every collected call (0.0 if none)."""
        generated = sum(int(c["drafts_generated"]) for c in self.calls)
        return sum(int(c["drafts_accepted"]) for c in self.calls) / generated if generated else 0.0
