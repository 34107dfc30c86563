"""LlamaIndex integration: :class:`MTPLLM` (LLM with tool calling) and :class:`MTPEmbedding`.

Setup::

    pip install "mtp-llm[llamaindex]"

Instantiate (cheap: the native model loads on first use and is shared by every
instance with the same engine settings)::

    from mtp_llm.llamaindex import MTPLLM, MTPEmbedding

    llm = MTPLLM(model_path="model.gguf", n_draft=3, temperature=0)
    embed_model = MTPEmbedding(model_path="model.gguf")

Complete, stream, chat::

    resp = llm.complete("The capital of France is", max_tokens=16, stop=["\\n"])
    resp.additional_kwargs["mtp_stats"]["acceptance_rate"]
    for chunk in llm.stream_complete("Once upon a time"):
        print(chunk.delta, end="")

Every call publishes its speculative-decoding stats under
:data:`~mtp_llm.STATS_KEY` in the final response's ``additional_kwargs`` (so in
``LLMCompletionEndEvent`` / ``LLMChatEndEvent``) and dispatches an
:class:`MTPStatsEvent` carrying the span id of the call.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, TypeVar

from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.base.llms.generic_utils import messages_to_prompt as generic_messages_to_prompt
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
    LogProb,
    MessageRole,
    TextBlock,
    ThinkingBlock,
)
from llama_index.core.instrumentation import get_dispatcher  # type: ignore[attr-defined]
from llama_index.core.instrumentation.span import active_span_id
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.custom import CustomLLM
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection
from llama_index.core.llms.structured_llm import StructuredLLM
from llama_index.core.instrumentation.events.llm import LLMStructuredPredictEndEvent, LLMStructuredPredictStartEvent
from llama_index.core.prompts import PromptTemplate
from llama_index.core.tools.types import BaseTool
from llama_index.core.types import PydanticProgramMode
from pydantic import BaseModel
from llama_index_instrumentation.base import BaseEvent

from ._derived import ChatFields, EmbeddingFields, LLMFields
from ._integration import (
    TOKEN_IDS_KEY,
    answer_ids,
    answer_token_ids,
    chat_prompt_tokens,
    chat_turn,
    display_name,
    logprob_entry,
    openai_message,
    parse_structured,
    stats_payload,
)
from .chat import DEFAULT_CHAT_TEMPLATE, ChatReply, ChatTurn, ToolCall, json_schema_grammar
from .errors import ChatParseError, InvalidOptionError
from .events import DoneEvent, Event, StatsEvent, TokenEvent
from .model import Model
from .options import GenerationOptions
from .session import MTP
from .stats import STATS_KEY, MTPStats

__all__ = ["MTPLLM", "STATS_KEY", "MTPEmbedding", "MTPStatsEvent"]

dispatcher = get_dispatcher(__name__)
Model_ = TypeVar("Model_", bound=BaseModel)

_TOOL_CALLS = "tool_calls"
"""Key of the tool calls in an assistant message's ``additional_kwargs``."""

_LLAMAINDEX_NAMES = {"context_window": "n_ctx", "num_output": "max_tokens"}
"""LlamaIndex's names of two options (``Settings.context_window``, ``Settings.num_output``): accepted by the constructor."""

_ROLES = {"chatbot": "assistant", "model": "assistant", "function": "tool", "developer": "system"}


class MTPStatsEvent(BaseEvent):
    """Speculative-decoding stats of one MTPLLM call.

    Dispatched every ``emit_stats_every`` tokens while the call runs
    (``final=False``) and once when it ends (``final=True``). ``span_id`` is the
    span of the LLM call that produced it, also when dispatched from a stream.
    """

    stats: dict[str, Any]
    """:meth:`mtp_llm.MTPStats.to_dict` of the call so far."""
    final: bool
    """True for the end-of-call event."""
    finish_reason: str | None = None
    """Why the call ended ("eog", "length" or "stop"); final events only."""
    model_name: str = ""

    @classmethod
    def class_name(cls) -> str:
        return "MTPStatsEvent"


class MTPLLM(FunctionCallingLLM, CustomLLM, ChatFields, LLMFields):
    """llama.cpp MTP speculative decoding as a LlamaIndex LLM.

    Chat goes through the GGUF's chat template (``chat_template`` overrides it;
    for a model without one, a custom ``messages_to_prompt`` if given, else
    ChatML; ``metadata.is_chat_model`` is True only with a real template). Tools,
    tool calls and reasoning go through llama.cpp's chat layer in the model's own
    format (:mod:`mtp_llm.chat`); the class implements ``FunctionCallingLLM`` and
    works with ``FunctionAgent``.

    Fields (derived from the one declaration of each option, as LangChain's are; see
    :mod:`mtp_llm._fields`): every :class:`~mtp_llm.SessionOptions` field, every
    :class:`~mtp_llm.GenerationOptions` field as an instance default (``temperature`` for
    ``temp``; None = that class's default), where the model comes from (``model_path``,
    ``repo_id``/``filename``/``revision``, ``model``, ``draft_model_path``, ``n_gpu_layers``,
    ``use_mmap``, ``rpc_servers``), ``model_name``, and the chat settings ``chat_template``,
    ``enable_thinking``, ``reasoning_effort``.

    Per-call keyword options (``max_tokens``, ``stop``, ``temperature``/``temp``, ...)
    override the instance defaults of the same names; ``n_draft`` sets the call's
    draft length ("auto", or up to the session's longest).
    """

    def __init__(self, /, **kwargs: Any) -> None:
        for name, option in _LLAMAINDEX_NAMES.items():
            if name in kwargs:
                value = kwargs.pop(name)
                if kwargs.get(option, value) != value:
                    raise InvalidOptionError(f"MTPLLM() got {name}={value!r} and {option}={kwargs[option]!r}: pass one")
                kwargs[option] = value
        super().__init__(**kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "MTPLLM"

    @property
    def context_window(self) -> int:
        """Tokens one call can hold, prompt and answer (LlamaIndex's name for ``n_ctx``)."""
        return int(self.n_ctx)

    @property
    def tokenizer(self) -> Callable[[str], list[int]]:
        """The model's own tokenizer as LlamaIndex takes one (``Settings.tokenizer = llm.tokenizer``):
        prompt helpers, splitters and ``TokenCountingHandler`` then count this model's tokens."""
        model = self.session.model
        return lambda text: model.tokenize(text, add_special=False)

    @property
    def num_output(self) -> int:
        """Tokens an answer may have (LlamaIndex's name for ``max_tokens``)."""
        return self._call_options({}).max_tokens

    # ------------------------------------------------------------ engine --

    @property
    def session(self) -> MTP:
        """The native session (loaded on first use, shared by instances with equal settings)."""
        return self._engine()

    @property
    def metadata(self) -> LLMMetadata:
        session = self.session
        return LLMMetadata(
            context_window=session.n_ctx_slot,
            num_output=self.num_output,
            is_chat_model=self._template() is not None,
            is_function_calling_model=True,
            model_name=self._display_name(),
        )

    def _template(self) -> str | None:
        """The user's template, else the GGUF's (None: a plain completion model)."""
        return self.chat_template or self.session.model.chat_template

    # ------------------------------------------------------------ prompts --

    def _completion_call(self, prompt: str, formatted: bool, kwargs: dict[str, Any]) -> _Call:
        if not formatted and self.completion_to_prompt is not None:
            prompt = self.completion_to_prompt(prompt)
        return _Call(self, prompt, self._call_options(kwargs), turn=None)

    def _chat_call(self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]) -> _Call:
        kwargs = dict(kwargs)
        tools = [_openai_tool(t) for t in kwargs.pop("tools", None) or []]
        tool_choice = kwargs.pop("tool_choice", None)
        parallel = bool(kwargs.pop("allow_parallel_tool_calls", False))
        enable_thinking = bool(kwargs.pop("enable_thinking", self.enable_thinking))
        reasoning_effort = kwargs.pop("reasoning_effort", self.reasoning_effort)
        template = self._template()
        options = self._call_options(kwargs)
        if template is None and self.messages_to_prompt is not generic_messages_to_prompt and not tools:
            # No chat template anywhere, but the user gave LlamaIndex's own formatter.
            formatter = self.messages_to_prompt
            assert formatter is not None
            return _Call(self, formatter(list(messages)), options, turn=None)
        turn = chat_turn(
            self.session,
            template or DEFAULT_CHAT_TEMPLATE,
            [_openai_message(m) for m in messages],
            tools=tools,
            tool_choice=tool_choice,
            parallel_tool_calls=parallel,
            enable_thinking=enable_thinking,
            reasoning_effort=reasoning_effort,
        )
        prompt = chat_prompt_tokens(self.session, turn.prompt, _answers(messages))
        return _Call(self, prompt, turn.options(options), turn=turn)

    # ---------------------------------------------------------- completion --

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        call = self._completion_call(prompt, formatted, kwargs)
        for _ in call.run():
            pass
        return call.completion_response(final=True)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        call = self._completion_call(prompt, formatted, kwargs)

        def gen() -> CompletionResponseGen:
            for delta in call.run():
                yield call.completion_response(delta)
            yield call.completion_response(final=True)

        return gen()

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        call = self._completion_call(prompt, formatted, kwargs)
        async for _ in call.arun():
            pass
        return call.completion_response(final=True)

    @llm_completion_callback()
    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseAsyncGen:
        call = self._completion_call(prompt, formatted, kwargs)

        async def gen() -> CompletionResponseAsyncGen:
            async for delta in call.arun():
                yield call.completion_response(delta)
            yield call.completion_response(final=True)

        return gen()

    # ---------------------------------------------------------------- chat --

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        call = self._chat_call(messages, kwargs)
        for _ in call.run():
            pass
        return call.chat_response(final=True)

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        call = self._chat_call(messages, kwargs)

        def gen() -> ChatResponseGen:
            for delta in call.run():
                yield call.chat_response(delta)
            yield call.chat_response(final=True)

        return gen()

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        call = self._chat_call(messages, kwargs)
        async for _ in call.arun():
            pass
        return call.chat_response(final=True)

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
        call = self._chat_call(messages, kwargs)

        async def gen() -> ChatResponseAsyncGen:
            async for delta in call.arun():
                yield call.chat_response(delta)
            yield call.chat_response(final=True)

        return gen()

    # --------------------------------------------------- structured output --

    def structured_predict(
        self,
        output_cls: type[Model_],
        prompt: PromptTemplate,
        llm_kwargs: dict[str, Any] | None = None,
        **prompt_args: Any,
    ) -> Model_:
        """An instance of ``output_cls``, generated under a grammar built from its JSON schema
        (compact JSON, so it always parses and validates; keys and punctuation are drafted from
        the grammar). With ``pydantic_program_mode`` other than DEFAULT, LlamaIndex's program."""
        if self.pydantic_program_mode != PydanticProgramMode.DEFAULT:
            predicted: Model_ = super().structured_predict(output_cls, prompt, llm_kwargs, **prompt_args)
            return predicted
        dispatcher.event(LLMStructuredPredictStartEvent(output_cls=output_cls, template=prompt, template_args=prompt_args))
        messages = prompt.format_messages(llm=self, **prompt_args)
        result, _ = self._structured_chat(output_cls, messages, llm_kwargs)
        dispatcher.event(LLMStructuredPredictEndEvent(output=result))
        return result

    async def astructured_predict(
        self,
        output_cls: type[Model_],
        prompt: PromptTemplate,
        llm_kwargs: dict[str, Any] | None = None,
        **prompt_args: Any,
    ) -> Model_:
        """:meth:`structured_predict` without blocking the event loop."""
        if self.pydantic_program_mode != PydanticProgramMode.DEFAULT:
            apredicted: Model_ = await super().astructured_predict(output_cls, prompt, llm_kwargs, **prompt_args)
            return apredicted
        dispatcher.event(LLMStructuredPredictStartEvent(output_cls=output_cls, template=prompt, template_args=prompt_args))
        messages = prompt.format_messages(llm=self, **prompt_args)
        result, _ = await self._astructured_chat(output_cls, messages, llm_kwargs)
        dispatcher.event(LLMStructuredPredictEndEvent(output=result))
        return result

    def _structured_chat(
        self, output_cls: type[Model_], messages: Sequence[ChatMessage], llm_kwargs: dict[str, Any] | None
    ) -> tuple[Model_, ChatResponse]:
        """The answer to ``messages`` under ``output_cls``'s schema grammar, parsed, and its response."""
        response = self.chat(messages, **_structured_kwargs(output_cls, llm_kwargs))
        return _parsed(output_cls, response), response

    async def _astructured_chat(
        self, output_cls: type[Model_], messages: Sequence[ChatMessage], llm_kwargs: dict[str, Any] | None
    ) -> tuple[Model_, ChatResponse]:
        response = await self.achat(messages, **_structured_kwargs(output_cls, llm_kwargs))
        return _parsed(output_cls, response), response

    def as_structured_llm(self, output_cls: type[BaseModel], **kwargs: Any) -> StructuredLLM:
        """LlamaIndex's structured LLM whose chat answers are generated under ``output_cls``'s schema
        grammar and parsed as :meth:`structured_predict` does; each response carries the call's stats."""
        return _MTPStructuredLLM(llm=self, output_cls=output_cls, **kwargs)

    # -------------------------------------------------------- tool calling --

    def _prepare_chat_with_tools(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        tool_choice: str | dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        messages = list(chat_history or [])
        if user_msg is not None:
            messages.append(
                ChatMessage(role=MessageRole.USER, content=user_msg) if isinstance(user_msg, str) else user_msg
            )
        if tool_choice is None:
            tool_choice = "required" if tool_required else "auto"
        return {"messages": messages, "tools": list(tools), "tool_choice": tool_choice, **kwargs}

    def get_tool_calls_from_response(
        self, response: ChatResponse, error_on_no_tool_call: bool = True, **kwargs: Any
    ) -> list[ToolSelection]:
        calls = response.message.additional_kwargs.get(_TOOL_CALLS) or []
        if not calls and error_on_no_tool_call:
            raise ChatParseError(
                f"expected at least one tool call, got the answer {response.message.content!r}: pass "
                "tool_required=True (or tool_choice) to force a call, or error_on_no_tool_call=False"
            )
        return [ToolSelection(tool_id=c["id"], tool_name=c["name"], tool_kwargs=c["arguments"]) for c in calls]


class _Call:
    """One generation: turns engine events into LlamaIndex responses and stats events.

    Built when the LLM method is called (inside its instrumentation span), so the
    span id and the validated options are fixed before any streaming starts. The
    sync and async paths differ only in how they pull engine events. A chat call
    parses its output through a :class:`~mtp_llm.chat.ChatTurn`.
    """

    def __init__(self, llm: MTPLLM, prompt: str | list[int], options: GenerationOptions, turn: ChatTurn | None) -> None:
        self.session = llm.session
        self.prompt = prompt
        self.options = options
        self.turn = turn
        self.model_name = llm._display_name()
        self.span_id = active_span_id.get()
        self.text = ""
        """The answer's text so far (the content, for a chat turn)."""
        self.thinking = ""
        self.thinking_delta = ""
        self.final_delta = ""
        """Delta of the final response: what the final parse added."""
        self.reply: ChatReply | None = None
        self.stats: MTPStats | None = None
        self.finish_reason: str | None = None
        self.ids: list[int] = []
        self.logprobs: list[list[LogProb]] | None = [] if options.logprobs or options.top_logprobs else None
        """Per token: its log-probability, then the most likely tokens' (``top_logprobs``)."""

    def run(self) -> Iterator[str]:
        """Run the generation, yielding each non-empty text delta."""
        for event in self.session.stream_events(self.prompt, options=self.options):
            delta = self._feed(event)
            if delta is not None:
                yield delta

    async def arun(self) -> AsyncIterator[str]:
        """:meth:`run` on :meth:`MTP.astream_events`: the event loop stays free."""
        async for event in self.session.astream_events(self.prompt, options=self.options):
            delta = self._feed(event)
            if delta is not None:
                yield delta

    def _feed(self, event: Event) -> str | None:
        """The text delta of a token event (None when the token added nothing visible)."""
        kind = type(event)
        if kind is TokenEvent:
            assert isinstance(event, TokenEvent)
            self.ids.append(event.id)
            if self.logprobs is not None:
                entry = logprob_entry(self.session.model, event)
                self.logprobs.append(
                    [LogProb(token=e["token"], logprob=e["logprob"], bytes=e["bytes"]) for e in [entry, *entry["top_logprobs"]]]
                )
            if not event.text:
                return None
            if self.turn is None:
                self.text += event.text
                return event.text
            delta = self.turn.feed(event.text)
            self.text += delta.content
            self.thinking += delta.reasoning
            self.thinking_delta = delta.reasoning
            return delta.content if delta.content or delta.reasoning else None
        if kind is StatsEvent:
            assert isinstance(event, StatsEvent)
            self._dispatch(event.stats, final=False)
        elif kind is DoneEvent:
            assert isinstance(event, DoneEvent)
            self.stats, self.finish_reason = event.stats, event.finish_reason
            if self.turn is not None:
                finish = self.turn.finish(event.finish_reason)
                self.reply = finish.reply
                self.final_delta = finish.delta.content
                self.thinking_delta = finish.delta.reasoning
                self.text, self.thinking = finish.reply.content, finish.reply.reasoning
            self._dispatch(event.stats, final=True)
        return None

    def _dispatch(self, stats: MTPStats, *, final: bool) -> None:
        dispatcher.event(
            MTPStatsEvent(
                stats=stats_payload(stats),
                final=final,
                finish_reason=self.finish_reason if final else None,
                model_name=self.model_name,
                span_id=self.span_id,
            )
        )

    def _final_kwargs(self) -> dict[str, Any]:
        stats = self.stats if self.stats is not None else self.session.last_stats
        return {STATS_KEY: stats_payload(stats), "finish_reason": self.finish_reason}

    def completion_response(self, delta: str = "", *, final: bool = False) -> CompletionResponse:
        if not final:
            return CompletionResponse(text=self.text, delta=delta, logprobs=self.logprobs)
        return CompletionResponse(
            text=self.text, delta=self.final_delta, additional_kwargs=self._final_kwargs(), logprobs=self.logprobs
        )

    def _message(self, extra: dict[str, Any]) -> ChatMessage:
        blocks: list[Any] = [ThinkingBlock(content=self.thinking)] if self.thinking else []
        blocks.append(TextBlock(text=self.text))
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=blocks, additional_kwargs=extra)

    def chat_response(self, delta: str = "", *, final: bool = False) -> ChatResponse:
        thinking = {"thinking_delta": self.thinking_delta} if self.thinking_delta else {}
        if not final:
            return ChatResponse(message=self._message({}), delta=delta, additional_kwargs=thinking)
        calls = self.reply.tool_calls if self.reply is not None else ()
        extra: dict[str, Any] = {TOKEN_IDS_KEY: answer_token_ids(self.ids, self.finish_reason)}
        if calls:
            extra[_TOOL_CALLS] = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls]
        return ChatResponse(
            message=self._message(extra),
            delta=self.final_delta,
            additional_kwargs={**self._final_kwargs(), **thinking},
            logprobs=self.logprobs,
        )


class MTPEmbedding(BaseEmbedding, EmbeddingFields):
    """Local embeddings computed by llama.cpp from a GGUF model's hidden states
    (mean-pooled, L2-normalised): offline RAG without another model.

    Shares the loaded weights with :class:`MTPLLM` instances on the same file. Fields:
    ``model_path``, ``n_threads``, ``n_gpu_layers`` (the same as LangChain's ``MTPEmbeddings``).
    """

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("model_name", display_name(kwargs.get("model_path")))
        super().__init__(**kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "MTPEmbedding"

    @property
    def model(self) -> Model:
        """The shared loaded model (loaded on first use)."""
        return self._loaded_model()

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._embed([query])[0]

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._embed([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return self._embed(list(texts))

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return (await asyncio.to_thread(self._embed, [query]))[0]

    async def _aget_text_embedding(self, text: str) -> Embedding:
        return (await asyncio.to_thread(self._embed, [text]))[0]

    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return await asyncio.to_thread(self._embed, list(texts))


# ------------------------------------------------------------------ helpers --


def _parsed(output_cls: type[Model_], response: ChatResponse) -> Model_:
    extra = response.additional_kwargs
    return parse_structured(
        response.message.content or "",
        output_cls.model_validate,
        output_cls.__name__,
        finish_reason=extra.get("finish_reason"),
        stats=extra.get(STATS_KEY),
    )


class _MTPStructuredLLM(StructuredLLM):
    """:class:`StructuredLLM` over :class:`MTPLLM`: answers parsed by :meth:`MTPLLM.structured_predict`'s
    path, the call's stats in ``additional_kwargs`` and the parsed object in ``raw``."""

    @classmethod
    def class_name(cls) -> str:
        return "MTPStructuredLLM"

    @staticmethod
    def _response(output: BaseModel, response: ChatResponse) -> ChatResponse:
        message = ChatMessage(role=MessageRole.ASSISTANT, content=output.model_dump_json())
        return ChatResponse(message=message, raw=output, additional_kwargs=dict(response.additional_kwargs))

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        llm = self.llm
        assert isinstance(llm, MTPLLM)
        return self._response(*llm._structured_chat(self.output_cls, messages, kwargs))

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        llm = self.llm
        assert isinstance(llm, MTPLLM)
        return self._response(*await llm._astructured_chat(self.output_cls, messages, kwargs))


def _structured_kwargs(output_cls: type[BaseModel], llm_kwargs: dict[str, Any] | None) -> dict[str, Any]:
    return {**(llm_kwargs or {}), "grammar": json_schema_grammar(output_cls.model_json_schema())}


def _answers(messages: Sequence[ChatMessage]) -> list[list[int]]:
    """The token ids earlier answers of this model were written with (``additional_kwargs``)."""
    return [ids for m in messages if (ids := answer_ids(m.additional_kwargs))]


def _openai_message(message: ChatMessage) -> dict[str, Any]:
    """A LlamaIndex message as an OpenAI chat message (what the chat layer renders)."""
    role = str(message.role.value if isinstance(message.role, MessageRole) else message.role)
    role = _ROLES.get(role, role)
    text = "".join(b.text for b in message.blocks if isinstance(b, TextBlock))
    calls = [ToolCall(c.get("id", ""), c["name"], c["arguments"]) for c in message.additional_kwargs.get(_TOOL_CALLS) or []]
    thinking = "".join(b.content or "" for b in message.blocks if isinstance(b, ThinkingBlock))
    call_id = message.additional_kwargs.get("tool_call_id")
    return openai_message(
        role, text, tool_calls=calls, reasoning=thinking, tool_call_id=str(call_id) if call_id else None
    )


def _openai_tool(tool: BaseTool | dict[str, Any]) -> dict[str, Any]:
    if isinstance(tool, dict):
        return tool if "function" in tool else {"type": "function", "function": tool}
    return tool.metadata.to_openai_tool()
