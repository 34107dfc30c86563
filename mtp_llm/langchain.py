"""LangChain integration: :class:`MTPLLM` (a ``BaseLLM``) and :class:`ChatMTP` (a ``BaseChatModel``).

Both run llama.cpp's native MTP speculative decoding through one shared
session per model file and load options (loaded lazily on first use, so
constructing a model is cheap), stream token by token through LangChain's
callbacks, and publish the speculative-decoding stats of every call:

* on the final chunk's ``generation_info`` (``MTPLLM``) / the message's
  ``response_metadata`` (``ChatMTP``), and in ``LLMResult.llm_output`` for
  non-streamed calls, under :data:`~mtp_llm.stats.STATS_KEY` (``"mtp_stats"``);
* as an ``on_custom_event`` named ``"mtp_stats"`` (data: ``{"stats": {...},
  "final": bool}``), at the end of each call and every ``emit_stats_every``
  tokens, visible to handlers and in ``astream_events(version="v2")``;
* in the LangSmith run's metadata (``extra.metadata["mtp_stats"]``);
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
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManager,
    AsyncCallbackManagerForLLMRun,
    BaseCallbackHandler,
    CallbackManager,
    CallbackManagerForLLMRun,
)
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel, BaseLLM, LanguageModelInput
from langchain_core.language_models.chat_models import generate_from_stream
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    HumanMessage,
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
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from ._integration import (
    EngineSpec,
    call_options,
    get_model,
    display_name,
    get_session,
    resolve_model_path,
    stats_payload,
)
from .chat import ChatDelta, ChatTurn, chat_format, normalize_tool_choice
from ._langchain_runs import Targeter, areport, report, run_target, stream_target, streaming_config
from .events import DoneEvent, Event, StatsEvent, TokenEvent
from .model import Model
from .options import DraftLength, GenerationOptions
from .session import MTP
from .stats import STATS_KEY

__all__ = ["MTPLLM", "STATS_KEY", "ChatMTP", "MTPEmbeddings", "MTPStatsHandler"]

_PROVIDER = "mtp_llm"
# Keyword arguments LangChain passes through to the model that are not generation options.
_LC_KWARGS = (
    "tools", "tool_choice", "ls_structured_output_format", "stream", "parallel_tool_calls", "enable_thinking",
    "reasoning_effort",
)
_session_lock = threading.Lock()


# ------------------------------------------------------------- shared core --


class _MTPParams(BaseModel):
    """Engine and generation fields shared by :class:`MTPLLM` and :class:`ChatMTP`."""

    model_config = ConfigDict(arbitrary_types_allowed=True, protected_namespaces=())

    model_path: str | None = None
    """Path of the GGUF model; None = the built-in default model (or ``repo_id``). Instances
    with the same model and load options share one lazily loaded native session."""
    repo_id: str | None = None
    """Hugging Face Hub repository to load from instead of ``model_path`` (with ``filename``;
    needs ``mtp-llm[hub]``); downloaded at first use into huggingface_hub's cache."""
    filename: str | None = None
    """File name or glob of the model in ``repo_id``, e.g. ``"*Q4_K_M.gguf"``."""
    revision: str | None = None
    """Branch, tag or commit of ``repo_id`` (None = main)."""
    model: Model | None = Field(default=None, exclude=True)
    """An already loaded :class:`mtp_llm.Model` (instead of ``model_path``); this
    instance creates its own session on it at first use."""
    session: MTP | None = Field(default=None, exclude=True)
    """An existing :class:`mtp_llm.MTP` session to run on (overrides ``model_path``,
    ``model`` and the load options)."""
    model_name: str | None = None
    """Name reported in ``response_metadata["model_name"]`` and traces (default: the file's stem)."""
    draft_model_path: str | None = None
    """Sidecar GGUF holding the MTP head (``mtp-*.gguf``) for trunk-only targets."""
    n_draft: DraftLength = "auto"
    """Draft tokens per speculative step: "auto" (the engine picks each step's length,
    never slower than plain decoding by design), a fixed number, or 0 = plain decoding."""
    n_draft_max: int = 4
    """Longest draft of ``n_draft="auto"``."""
    p_min: float = 0.0
    """Stop a draft below this confidence (llama.cpp's draft p_min; 0 = never)."""
    n_ctx: int = 2048
    """Context size (prompt plus generated tokens)."""
    n_batch: int = 512
    """Maximum tokens per decode call (prompt chunk size)."""
    n_threads: int | None = None
    """Decode threads (None = all cores)."""
    n_threads_batch: int | None = None
    """Prompt/verify threads (None = ``n_threads``)."""
    flash_attn: bool | None = None
    """Flash attention: None = auto (off on a CPU-only build, where it is slower), True/False to force."""
    type_k: str | None = None
    """K cache type ("f16", "q8_0", ...; None = f16)."""
    type_v: str | None = None
    """V cache type ("f16", "q8_0", ...; None = f16)."""
    offload_kqv: bool = True
    """Keep the KV cache and attention on the GPU backend."""
    rollback: str = "auto"
    """Hybrid (recurrent) targets: "rs" rolls recurrent state back in place, "checkpoint"
    saves/restores it each round; "auto" = "rs"."""
    cache_prompt: bool = True
    """Reuse the prompt prefix the session already holds (chat history, agent scratchpad)."""
    cache_size_mb: float = 256.0
    """Memory for saved states of other conversations on the shared session (an LRU)."""
    fuse_catch_up: bool = True
    """Decode the MTP head's catch-up with its first draft step (one head decode less
    per iteration) where it applies; False = llama.cpp's own draft-mtp driver."""
    grammar_drafts: bool = True
    """Draft the text a call's grammar forces (JSON keys, punctuation) without a head pass."""
    n_parallel: int = 1
    """Calls that run at once on the shared session (``batch``, ``abatch``, concurrent
    ``ainvoke``/``astream``): their drafts and verifies share each step's batches. ``n_ctx``
    is divided among them (each holds ``n_ctx // n_parallel`` tokens)."""
    n_gpu_layers: int | None = None
    """Layers offloaded to GPU backends and RPC servers, counted from the last; -1 = all
    (None = 0, or all with ``rpc_servers``)."""
    use_mmap: bool = True
    """Memory-map the model file."""
    rpc_servers: list[str] | None = None
    """``host:port`` of ``mtp-llm rpc-server`` processes that hold offloaded layers
    (see docs/scale-out.md); checked before loading and before each call."""

    max_tokens: int | None = None
    """Maximum tokens generated per call (None = the engine's default, 256)."""
    temperature: float | None = None
    """Sampling temperature; 0 = greedy (None = the engine's default, 0.8)."""
    top_k: int | None = None
    """Top-k sampling (None = engine default)."""
    top_p: float | None = None
    """Nucleus sampling (None = engine default)."""
    min_p: float | None = None
    """Min-p sampling (None = engine default)."""
    seed: int | None = None
    """Sampler seed (None = random per call)."""
    repeat_penalty: float | None = None
    """Repetition penalty (None = engine default, 1.0 = off)."""
    frequency_penalty: float | None = None
    """Frequency penalty (None = engine default)."""
    presence_penalty: float | None = None
    """Presence penalty (None = engine default)."""
    penalty_last_n: int | None = None
    """Tokens considered by the penalties (None = engine default)."""
    stop: list[str] | None = None
    """Stop strings: generation ends at the first one, which is never emitted. A
    per-call ``stop`` replaces these."""
    grammar: str | None = None
    """A GBNF grammar constraining every output."""
    timeout: float | None = None
    """Seconds before a generation is stopped with ``GenerationTimeoutError``."""
    reasoning_budget: int | None = None
    """Most reasoning tokens of a chat turn whose format has a reasoning section: 0 = no
    reasoning, N = at most N, then the section is closed (None = the engine's default, -1:
    unlimited)."""
    emit_stats_every: int = 0
    """Also emit the ``"mtp_stats"`` custom event every N tokens (0 = only at the end)."""

    _own_session: MTP | None = PrivateAttr(default=None)

    # -- engine

    @property
    def client(self) -> MTP:
        """The native session, loaded on first use."""
        if self.session is not None:
            return self.session
        if self._own_session is None:
            with _session_lock:
                if self._own_session is None:
                    self._own_session = get_session(EngineSpec.of(self), self.model)
        return self._own_session

    def _display_name(self) -> str:
        if self.model_name:
            return self.model_name
        if self.session is not None:
            return self.session.model.path.stem
        if self.model is not None:
            return self.model.path.stem
        return display_name(self.model_path, self.repo_id, self.filename)

    def _call_options(self, stop: Sequence[str] | None, kwargs: Mapping[str, Any]) -> GenerationOptions:
        """Instance options, overridden by per-call ones (a per-call ``stop`` wins)."""
        return call_options(self, {k: v for k, v in kwargs.items() if k not in _LC_KWARGS}, stop)

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

    first: Any = None
    """The first chunk handed out (LangChain writes the run id into chat chunks)."""

    def first_message_id(self) -> str | None:
        """The first chat chunk's message id, once LangChain has set it."""
        return self.first.message.id if self.first is not None else None

    def token(self, event: TokenEvent) -> Any:
        raise NotImplementedError

    def done(self, event: DoneEvent) -> Any:
        raise NotImplementedError


def _drive(
    events: Iterator[Event],
    chunker: _Chunker,
    target: Targeter,
    token_callback: CallbackManagerForLLMRun | None,
) -> Iterator[Any]:
    """The sync path: engine events -> chunks, token callbacks, stats reports
    (dispatch on the exact event type: the per-token branch comes first)."""
    for event in events:
        kind = type(event)
        if kind is TokenEvent:
            chunk = chunker.token(event)  # type: ignore[arg-type]
            if chunker.first is None:
                chunker.first = chunk
            if token_callback is not None:
                token_callback.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk
        elif kind is StatsEvent:
            report(target(), event.stats, final=False)  # type: ignore[union-attr]
        elif kind is DoneEvent:
            report(target(), event.stats, final=True)  # type: ignore[union-attr]
            yield chunker.done(event)  # type: ignore[arg-type]


async def _adrive(
    events: AsyncIterator[Event],
    chunker: _Chunker,
    target: Targeter,
    token_callback: AsyncCallbackManagerForLLMRun | None,
) -> AsyncIterator[Any]:
    """The async path: the same translation as :func:`_drive` over ``MTP.astream_events``."""
    async for event in events:
        kind = type(event)
        if kind is TokenEvent:
            chunk = chunker.token(event)  # type: ignore[arg-type]
            if chunker.first is None:
                chunker.first = chunk
            if token_callback is not None:
                await token_callback.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk
        elif kind is StatsEvent:
            await areport(target(), event.stats, final=False)  # type: ignore[union-attr]
        elif kind is DoneEvent:
            await areport(target(), event.stats, final=True)  # type: ignore[union-attr]
            yield chunker.done(event)  # type: ignore[arg-type]


# ------------------------------------------------------------------ MTPLLM --


class _TextChunker(_Chunker):
    def token(self, event: TokenEvent) -> GenerationChunk:
        return GenerationChunk(text=event.text, generation_info={"token_id": event.id})

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
        options = self._call_options(stop, kwargs)
        events = self.client.stream_events(prompt, options=options)
        for chunk in _drive(events, _TextChunker(), run_target(run_manager), run_manager):
            if (kept := _mergeable(chunk)) is not None:
                yield kept

    async def _astream(
        self,
        prompt: str,
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[GenerationChunk]:
        options = self._call_options(stop, kwargs)
        events = self.client.astream_events(prompt, options=options)
        async for chunk in _adrive(events, _TextChunker(), run_target(run_manager), run_manager):
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
    empty pieces of held-back tokens (a split character, a possible stop string)."""
    if chunk.generation_info is not None and STATS_KEY in chunk.generation_info:
        return chunk
    return GenerationChunk(text=chunk.text) if chunk.text else None


def _llm_result(per_prompt: list[list[GenerationChunk]]) -> LLMResult:
    generations = []
    payloads = []
    for chunks in per_prompt:
        info = chunks[-1].generation_info if chunks else None
        generations.append([Generation(text="".join(c.text for c in chunks), generation_info=info)])
        payloads.append((info or {}).get(STATS_KEY))
    return LLMResult(generations=generations, llm_output={STATS_KEY: payloads[0] if len(payloads) == 1 else payloads})


# ----------------------------------------------------------------- ChatMTP --


def _openai_messages(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """LangChain messages as OpenAI chat messages (what the chat layer renders)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        text = message.text if isinstance(message.text, str) else str(message.content)
        if isinstance(message, SystemMessage):
            out.append({"role": "system", "content": text})
        elif isinstance(message, HumanMessage):
            out.append({"role": "user", "content": text})
        elif isinstance(message, AIMessage):
            entry: dict[str, Any] = {"role": "assistant", "content": text}
            if message.tool_calls:
                entry["tool_calls"] = [
                    {"id": c.get("id") or "", "type": "function", "function": {"name": c["name"], "arguments": c["args"]}}
                    for c in message.tool_calls
                ]
            reasoning = message.additional_kwargs.get("reasoning_content")
            if isinstance(reasoning, str) and reasoning:
                entry["reasoning_content"] = reasoning
            out.append(entry)
        elif isinstance(message, ToolMessage):
            out.append({"role": "tool", "content": text, "tool_call_id": message.tool_call_id, "name": message.name or ""})
        elif isinstance(message, ChatMessage):
            out.append({"role": message.role, "content": text})
        else:
            out.append({"role": "user", "content": text})
    return out


def _tool_names(tools: Sequence[Mapping[str, Any]]) -> list[str]:
    return [str(t.get("function", t).get("name")) for t in tools]


class _ChatChunker(_Chunker):
    """Chat chunks from a :class:`~mtp_llm.chat.ChatTurn`: content and reasoning stream as
    they parse, tool calls as ``tool_call_chunks``."""

    def __init__(self, model_name: str, turn: ChatTurn) -> None:
        self.model_name = model_name
        self.turn = turn

    def token(self, event: TokenEvent) -> ChatGenerationChunk:
        return ChatGenerationChunk(message=_message_chunk(self.turn.feed(event.text)))

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
        info = {"finish_reason": event.finish_reason, "model_name": self.model_name, STATS_KEY: stats_payload(stats)}
        return ChatGenerationChunk(message=message, generation_info=info)


def _message_chunk(delta: ChatDelta, **fields: Any) -> AIMessageChunk:
    calls: list[ToolCallChunk] = [
        tool_call_chunk(name=c.name, args=c.arguments, id=c.id, index=c.index) for c in delta.tool_calls
    ]
    extra = {"reasoning_content": delta.reasoning} if delta.reasoning else {}
    return AIMessageChunk(content=delta.content, additional_kwargs=extra, tool_call_chunks=calls, **fields)


class ChatMTP(_MTPParams, BaseChatModel):
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

    chat_template: str | None = None
    """Jinja chat template overriding the GGUF's (ChatML when the GGUF has none)."""
    enable_thinking: bool = True
    """Let reasoning models think (for templates with a switch); a call may pass its own."""
    reasoning_effort: str | None = None
    """Passed to templates that read it (gpt-oss "low"/"medium"/"high", Hunyuan's "no_think"/"low"/"high");
    None: the template's default. A call may pass its own."""
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
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools; calls are produced under a grammar built from their JSON schemas.

        Args:
            tools: LangChain tools, functions, pydantic models, TypedDicts or OpenAI tool dicts.
            tool_choice: "auto" (default: call a tool or answer), "any"/"required"/True
                (must call a tool), "none" (plain answer), or a tool name / OpenAI-style
                ``{"type": "function", "function": {"name": ...}}`` (must call that tool).
            **kwargs: further per-call options bound with the tools.

        Returns:
            The model bound to the tools.
        """
        formatted = [convert_to_openai_tool(t) for t in tools]
        normalize_tool_choice(tool_choice, _tool_names(formatted))  # fail early on a bad choice
        return super().bind(tools=formatted, tool_choice=tool_choice, **kwargs)

    def _prepare(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any]
    ) -> tuple[str, GenerationOptions, _ChatChunker]:
        session = self.client
        tools = kwargs.get("tools") or []
        turn = chat_format(session.model, self.chat_template).turn(
            _openai_messages(messages),
            tools=tools,
            tool_choice=normalize_tool_choice(kwargs.get("tool_choice"), _tool_names(tools)),
            parallel_tool_calls=bool(kwargs.get("parallel_tool_calls", False)),
            enable_thinking=bool(kwargs.get("enable_thinking", self.enable_thinking)),
            reasoning_effort=kwargs.get("reasoning_effort", self.reasoning_effort),
        )
        return turn.prompt, turn.options(self._call_options(stop, kwargs)), _ChatChunker(self._display_name(), turn)

    def stream(
        self,
        input: LanguageModelInput,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> Iterator[AIMessageChunk]:
        """See ``BaseChatModel.stream``; also lets the stats reach this run's handlers."""
        with streaming_config(config, CallbackManager) as config:
            yield from super().stream(input, config, stop=stop, **kwargs)

    async def astream(
        self,
        input: LanguageModelInput,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[AIMessageChunk]:
        """See ``BaseChatModel.astream``; also lets the stats reach this run's handlers."""
        with streaming_config(config, AsyncCallbackManager) as config:
            async for chunk in super().astream(input, config, stop=stop, **kwargs):
                yield chunk

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        prompt, options, chunker = self._prepare(messages, stop, kwargs)
        target = stream_target(self, run_manager, chunker.first_message_id)
        yield from _drive(self.client.stream_events(prompt, options=options), chunker, target, None)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        prompt, options, chunker = self._prepare(messages, stop, kwargs)
        target = stream_target(self, run_manager, chunker.first_message_id)
        async for chunk in _adrive(self.client.astream_events(prompt, options=options), chunker, target, None):
            yield chunk

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        prompt, options, chunker = self._prepare(messages, stop, kwargs)
        chunks = list(_drive(self.client.stream_events(prompt, options=options), chunker, run_target(run_manager), run_manager))
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
        return _chat_result([c async for c in _adrive(events, chunker, run_target(run_manager), run_manager)])


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


class MTPEmbeddings(BaseModel, Embeddings):
    """Local embeddings from a GGUF model's own hidden states (mean-pooled, L2-normalised),
    computed by llama.cpp: retrieval without a second model or a network.

    Shares the loaded weights with :class:`ChatMTP` / :class:`MTPLLM` on the same file.

    ```python
    from langchain_core.vectorstores import InMemoryVectorStore

    store = InMemoryVectorStore.from_texts(["Bees make honey."], MTPEmbeddings())
    ```
    """

    model_config = ConfigDict(protected_namespaces=())

    model_path: str | None = None
    """GGUF file; None = the built-in default model."""
    n_threads: int | None = None
    """Threads (None = all cores)."""
    n_gpu_layers: int = 0
    """Layers offloaded to a GPU backend."""

    def _model(self) -> Model:
        return get_model(resolve_model_path(self.model_path), n_gpu_layers=self.n_gpu_layers)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed texts (one vector per text)."""
        return self._model().embed(list(texts), n_threads=self.n_threads)

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
