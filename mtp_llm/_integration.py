"""Engine-facing logic shared by the LangChain and LlamaIndex integrations.

Both frameworks need the same things from the engine: a lazily loaded session
shared between instances with the same settings, per-call options merged over
instance defaults (stop sequences included), chat prompts rendered with the
GGUF's template, and the stats payload. They live here once (chat turns, tools
and their parsing in :mod:`mtp_llm.chat`); the framework modules only adapt types.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from .chat import DEFAULT_CHAT_TEMPLATE, ToolCall, chat_format
from .errors import InvalidOptionError, MTPError, StructuredOutputError
from .events import TokenEvent
from .model import Model
from .chat import ChatTurn, normalize_tool_choice
from .options import GenerationOptions, SessionOptions, normalize_stop, option, option_specs
from .session import MTP
from .stats import STATS_KEY, MTPStats

__all__ = [
    "CALL_ONLY_OPTIONS",
    "DEFAULT_CHAT_TEMPLATE",
    "ChatSettings",
    "OPTION_ATTRIBUTES",
    "STATS_KEY",
    "EmbeddingSpec",
    "EngineSpec",
    "call_options",
    "TOKEN_IDS_KEY",
    "answer_ids",
    "answer_token_ids",
    "chat_prompt",
    "chat_prompt_tokens",
    "chat_turn",
    "display_name",
    "get_model",
    "get_session",
    "instance_options",
    "json_object",
    "logprob_entry",
    "openai_message",
    "parse_structured",
    "resolve_chat_template",
    "resolve_model_path",
    "stats_payload",
]


@dataclasses.dataclass(frozen=True)
class EngineSpec:
    """Everything that identifies a loaded model + session. Equal specs share one session."""

    model_path: str | None = None
    """Path of the GGUF model; None = the built-in default model (or ``repo_id``). Instances
    with the same model and load options share one lazily loaded native session."""
    repo_id: str | None = None
    """Hugging Face Hub repository to load from instead of ``model_path`` (with ``filename``;
    needs ``mtp-llm[hub]``); downloaded at first use into huggingface_hub's cache."""
    filename: str | None = None
    """File name or glob of the model in ``repo_id`` (e.g. ``*Q4_K_M.gguf``)."""
    revision: str | None = None
    """Branch, tag or commit of ``repo_id`` (None = main)."""
    draft_model_path: str | None = None
    """Sidecar GGUF holding the MTP head (``mtp-*.gguf``); None = the one beside a trunk-only
    target or fetched with it from the repository, if any."""
    n_gpu_layers: int | None = option(None, ge=-1)
    """Layers offloaded to GPU backends and RPC servers, counted from the last; -1 = all
    (None = 0, or all with ``rpc_servers``)."""
    use_mmap: bool = True
    """Memory-map the model file."""
    rpc_servers: tuple[str, ...] | None = None
    """``host:port`` of ``mtp-llm rpc-server`` processes that hold offloaded layers
    (docs/scale-out.md); checked before loading and before each call."""
    session_options: SessionOptions = dataclasses.field(default_factory=SessionOptions)
    """What the session is created with."""

    def __post_init__(self) -> None:
        if self.repo_id is not None and self.model_path is not None:
            raise InvalidOptionError("pass either model_path or repo_id/filename, not both")
        if (self.repo_id is None) != (self.filename is None):
            raise InvalidOptionError(
                "repo_id and filename go together: the repository and the file name or glob in it (e.g. '*Q4_K_M.gguf')"
            )

    @classmethod
    def of(cls, instance: object) -> EngineSpec:
        """The spec of an integration instance, read by field name: its attributes named
        like this class's fields and like every :class:`SessionOptions` field."""
        loading = {f.name: getattr(instance, f.name) for f in dataclasses.fields(cls) if f.name != "session_options"}
        if loading["rpc_servers"] is not None:
            loading["rpc_servers"] = tuple(loading["rpc_servers"])
        session = {f.name: getattr(instance, f.name) for f in dataclasses.fields(SessionOptions)}
        return cls(**loading, session_options=SessionOptions(**session))


def display_name(model_path: str | None, repo_id: str | None = None, filename: str | None = None) -> str:
    """A model's name in metadata and traces: the file's stem (a repository's name for a glob
    file name); ``mtp-llm-default`` for the built-in model."""
    source = filename if filename and not any(c in filename for c in "*?[") else repo_id
    source = source or model_path
    if source is None:
        return "mtp-llm-default"
    return source.replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".gguf")


def resolve_model_path(model_path: str | None) -> str:
    """The real path of a GGUF file; None = the built-in default model."""
    if model_path is None:
        from .default_model import default_model_path

        return str(default_model_path())
    return os.path.realpath(os.fspath(model_path))


_lock = threading.Lock()
_models: dict[tuple[str, bool, int, bool, tuple[str, ...]], Model] = {}
_sessions: dict[EngineSpec, MTP] = {}


def get_model(
    path: str,
    *,
    load_mtp: bool = True,
    n_gpu_layers: int | None = None,
    use_mmap: bool = True,
    rpc_servers: Sequence[str] | None = None,
) -> Model:
    """Load a model once per process and settings. A model whose RPC server was lost is
    loaded again (its remote layers are gone)."""
    servers = tuple(rpc_servers or ())
    if n_gpu_layers is None:  # Model.load's default, spelled out so equal settings share a model
        n_gpu_layers = -1 if servers else 0
    key = (os.path.realpath(path), load_mtp, n_gpu_layers, use_mmap, servers)
    with _lock:
        model = _models.get(key)
    if model is not None and servers:
        try:
            model.check_rpc()
        except MTPError:
            with _lock:
                if _models.get(key) is model:
                    del _models[key]
            model = None
    if model is None:
        model = Model.load(
            path, load_mtp=load_mtp, n_gpu_layers=n_gpu_layers, use_mmap=use_mmap, rpc_servers=list(servers) or None
        )
        with _lock:
            model = _models.setdefault(key, model)
    return model


def get_session(spec: EngineSpec, model: Model | None = None) -> MTP:
    """The session for ``spec``: loaded from ``spec.model_path``, created on first use and
    shared by equal specs; or, on an already loaded ``model`` (which replaces
    ``spec.model_path``), a new session for the caller alone."""
    if model is not None:
        return _new_session(model, spec)
    with _lock:
        session = _sessions.get(spec)
    if session is not None and spec.rpc_servers and not _rpc_alive(session):
        with _lock:
            if _sessions.get(spec) is session:
                del _sessions[spec]
        session = None
    if session is not None:
        return session
    model, sidecar = _load_target(spec)
    session = _new_session(model, spec, sidecar)
    with _lock:
        return _sessions.setdefault(spec, session)


def _rpc_alive(session: MTP) -> bool:
    """False once a connection to an RPC server of the session's models was lost: the next
    call then loads the model again (the error of the call that found it is raised as is)."""
    try:
        session.model.check_rpc()
        if session.draft_model is not None:
            session.draft_model.check_rpc()
    except MTPError:
        return False
    return True


def _load_target(spec: EngineSpec) -> tuple[Model, Path | None]:
    """The target of ``spec`` (a local path or a Hub repository), loaded once per process, and
    the sidecar head fetched with it from the repository."""

    def load(path: str | Path) -> Model:
        return get_model(
            os.fspath(path), n_gpu_layers=spec.n_gpu_layers, use_mmap=spec.use_mmap, rpc_servers=spec.rpc_servers
        )

    if spec.repo_id is None or spec.filename is None:
        return load(resolve_model_path(spec.model_path)), None
    from .hub import pretrained_files

    files = pretrained_files(
        spec.repo_id, spec.filename, revision=spec.revision, is_trunk_only=lambda path: load(path).needs_sidecar
    )
    return load(files.target), files.sidecar


def _new_session(model: Model, spec: EngineSpec, sidecar: Path | None = None) -> MTP:
    """A session on ``model``: the sidecar head named by ``spec``, else the repository's, else
    the one beside the file (loaded once per process)."""
    path = spec.draft_model_path or sidecar
    if path is None and spec.session_options.may_draft:
        path = model._auto_sidecar()
    draft = (
        get_model(os.fspath(path), n_gpu_layers=spec.n_gpu_layers, use_mmap=spec.use_mmap, rpc_servers=spec.rpc_servers)
        if path
        else None
    )
    return MTP.from_options(model, spec.session_options, draft_model=draft)


def instance_options() -> dict[str, str]:
    """Generation option -> the integration attribute holding its instance default: every
    :class:`GenerationOptions` field that is not also a :class:`SessionOptions` field, under its
    integration name (``temp`` -> ``temperature``, as the frameworks call it)."""
    session = {f.name for f in dataclasses.fields(SessionOptions)}
    return {s.name: s.attribute or s.name for s in option_specs(GenerationOptions) if s.name not in session}


OPTION_ATTRIBUTES: dict[str, str] = instance_options()
"""Generation option -> the integration attribute holding its instance default."""

CALL_ONLY_OPTIONS = frozenset(f.name for f in dataclasses.fields(GenerationOptions)) - frozenset(OPTION_ATTRIBUTES)
"""Generation options that have no instance default: an integration's ``n_draft`` and
``cache_prompt`` fields are the session's (:class:`SessionOptions` fields); a call's
``n_draft`` ("auto", or up to the session's longest draft) or ``cache_prompt`` overrides them."""


def call_options(
    instance: object,
    call_kwargs: Mapping[str, Any],
    stop: str | Sequence[str] | None = None,
) -> GenerationOptions:
    """The options of one call, for ``MTP.stream_events(..., options=...)``: the
    instance's defaults (read through :data:`OPTION_ATTRIBUTES`), overridden by per-call
    kwargs (``temperature`` accepted for ``temp``; a per-call ``stop`` wins over the
    instance's, with no error when both are set). None values mean "unset". Unknown
    options raise :class:`InvalidOptionError`."""
    merged = {option: getattr(instance, attr, None) for option, attr in OPTION_ATTRIBUTES.items()}
    merged = {k: v for k, v in merged.items() if v is not None}
    call = dict(call_kwargs)
    if "temperature" in call:
        call["temp"] = call.pop("temperature")
    if stop is None:
        stop = call.pop("stop", None)
    merged.update({k: v for k, v in call.items() if v is not None})
    if stop is not None:
        merged["stop"] = normalize_stop(stop)
    return GenerationOptions.from_kwargs(None, **merged)


def chat_prompt(model: Model, messages: Sequence[tuple[str, str]], chat_template: str | None = None) -> str:
    """Render ``(role, content)`` messages with the user's template, else the GGUF's own
    (through llama.cpp's chat layer, as every chat call is)."""
    return chat_format(model, chat_template).render([{"role": r, "content": c} for r, c in messages])


def resolve_chat_template(model: Model, chat_template: str | None = None) -> str:
    """The template a chat prompt is rendered with: the user's, else the GGUF's, else ChatML."""
    return chat_template or model.chat_template or DEFAULT_CHAT_TEMPLATE


def stats_payload(stats: MTPStats) -> dict[str, Any]:
    """The per-call stats as published by every integration under :data:`STATS_KEY`."""
    return stats.to_dict()


T = TypeVar("T")


def parse_structured(
    text: str,
    validate: Callable[[Any], T],
    what: str,
    *,
    finish_reason: str | None,
    stats: Mapping[str, Any] | None,
    fix: str = "",
    error: type[StructuredOutputError] = StructuredOutputError,
) -> T:
    """The structured answer in ``text``, checked by ``validate`` (a pydantic model's
    ``model_validate``, or :func:`json_object`): every structured-output path of both integrations
    parses here, so a cut or mismatching answer raises the same :class:`StructuredOutputError`
    (``what`` names the expected shape, ``fix`` says what to change when the JSON mismatches)."""

    def fail(reason: str) -> StructuredOutputError:
        shown = text if len(text) <= 200 else text[:200] + "..."
        return error(
            f"{reason}; the answer was {shown!r}",
            text=text,
            finish_reason=finish_reason,
            stats=dict(stats) if stats is not None else None,
        )

    try:
        data = json.loads(text, parse_float=_finite)
    except _OutOfRange as exc:
        raise fail(f"the structured answer has a number out of range ({exc})") from None
    except ValueError as exc:
        if finish_reason == "length":
            raise fail(
                "the structured answer was cut at max_tokens before its JSON closed (finish_reason='length'): "
                "raise max_tokens"
            ) from None
        raise fail(f"the structured answer is not JSON ({exc})") from None
    try:
        return validate(data)
    except (ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
        raise fail(f"the structured answer does not match {what}: {exc}{'; ' + fix if fix else ''}") from None


class _OutOfRange(ValueError):
    pass


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _OutOfRange(text)
    return value


def json_object(data: Any) -> dict[str, Any]:
    """``data`` if it is a JSON object (the check of structured output without a model class)."""
    if not isinstance(data, dict):
        raise TypeError(f"expected a JSON object, got {type(data).__name__}")
    return data


def logprob_entry(model: Model, event: TokenEvent) -> dict[str, Any]:
    """One token's log-probabilities in OpenAI's shape (``{"token", "bytes", "logprob",
    "top_logprobs": [{"token", "bytes", "logprob"}, ...]}``), as LangChain's OpenAI models
    publish them; LlamaIndex's ``LogProb`` lists are built from the same entries."""

    def token(token_id: int, logprob: float) -> dict[str, Any]:
        raw = model.token_piece(token_id)
        return {"token": raw.decode("utf-8", errors="replace"), "bytes": list(raw), "logprob": logprob}

    entry = token(event.id, float(event.logprob if event.logprob is not None else 0.0))
    entry["top_logprobs"] = [token(t, p) for t, p in event.top_logprobs]
    return entry


# ------------------------------------------------------------- embeddings --


@dataclasses.dataclass(frozen=True)
class EmbeddingSpec:
    """The options of both embedding integrations (LangChain's ``MTPEmbeddings``, LlamaIndex's
    ``MTPEmbedding``), whose fields are derived from these."""

    model_path: str | None = None
    """GGUF file; None = the built-in default model."""
    n_threads: int | None = option(None, ge=1)
    """Threads (None = all cores)."""
    n_gpu_layers: int = option(0, ge=-1)
    """Layers offloaded to a GPU backend (-1 = all)."""

    @classmethod
    def of(cls, instance: object) -> EmbeddingSpec:
        """The spec of an embedding integration instance, read by field name."""
        return cls(**{f.name: getattr(instance, f.name) for f in dataclasses.fields(cls)})

    def model(self) -> Model:
        """The model, loaded once per process (shared with the LLM integrations on the same file)."""
        return get_model(resolve_model_path(self.model_path), n_gpu_layers=self.n_gpu_layers)



# ------------------------------------------------------------------- chat --


@dataclasses.dataclass(frozen=True)
class ChatSettings:
    """The chat options of both integrations' chat models (LangChain's ``ChatMTP``, LlamaIndex's
    ``MTPLLM``), whose fields are derived from these; a call may pass its own
    ``enable_thinking`` / ``reasoning_effort``."""

    chat_template: str | None = None
    """Jinja chat template overriding the GGUF's (ChatML when the GGUF has none)."""
    enable_thinking: bool = True
    """Let reasoning models think (for templates with a switch); a call may pass its own."""
    reasoning_effort: str | None = None
    """Passed to templates that read it (gpt-oss "low"/"medium"/"high", Hunyuan's "no_think"/"low"/"high");
    None: the template's default. A call may pass its own."""


def openai_message(
    role: str,
    text: str,
    *,
    tool_calls: Sequence[ToolCall] = (),
    reasoning: str = "",
    tool_call_id: str | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    """One chat message as the chat layer reads it (OpenAI's format), from either framework's
    message: an assistant's earlier tool calls and reasoning, a tool result's call id and name."""
    out: dict[str, Any] = {"role": role, "content": text}
    if role == "assistant" and tool_calls:
        out["tool_calls"] = [call.to_openai() for call in tool_calls]
    if role == "assistant" and reasoning:
        out["reasoning_content"] = reasoning
    if role == "tool" and tool_call_id is not None:
        out["tool_call_id"] = tool_call_id
    if role == "tool" and name is not None:
        out["name"] = name
    return out


TOKEN_IDS_KEY = "token_ids"
"""Where an answer's metadata keeps the ids of the tokens the model wrote it with (LangChain:
``response_metadata``; LlamaIndex: the message's ``additional_kwargs``): :func:`chat_prompt_tokens`
puts them back when the answer is part of a later prompt."""


def answer_token_ids(ids: Sequence[int], finish_reason: str | None) -> list[int]:
    """The ids an answer keeps under :data:`TOKEN_IDS_KEY`: what it generated, less the end-of-generation token
    (the template writes its own)."""
    return list(ids[:-1] if finish_reason == "eog" and ids else ids)


def answer_ids(metadata: Mapping[str, Any]) -> list[int] | None:
    """The token ids an earlier answer's metadata keeps under :data:`TOKEN_IDS_KEY`, if valid."""
    ids = metadata.get(TOKEN_IDS_KEY)
    return ids if isinstance(ids, list) and ids and all(type(i) is int for i in ids) else None


def chat_prompt_tokens(session: MTP, prompt: str, answers: Sequence[Sequence[int]]) -> str | list[int]:
    """``prompt`` as the tokens to decode, with each earlier answer in it as the tokens the model wrote it
    with (``answers``, in order): a grammar makes a model write ``{`` ``"`` where the tokenizer would
    write ``{"``, so a re-tokenized answer would part from the cached conversation at its first token.
    The text is unchanged; an answer the template rendered differently from how it was written (or one
    not found) is tokenized as text. Without answers, the prompt text itself."""
    pieces: list[tuple[str, list[int]]] = []
    position = 0
    for ids in answers:
        text = session.model.detokenize(ids)
        found = prompt.find(text, position) if text else -1
        if found < 0:
            continue
        pieces.append((prompt[position:found], list(ids)))
        position = found + len(text)
    if not pieces:
        return prompt
    tokens: list[int] = []
    for before, ids in pieces:
        if before or not tokens:
            tokens += session.model.tokenize(before, add_special=not tokens)
        tokens += ids
    if position < len(prompt):
        tokens += session.model.tokenize(prompt[position:], add_special=False)
    return tokens


def chat_turn(
    session: MTP,
    chat_template: str | None,
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] = (),
    tool_choice: Any = None,
    parallel_tool_calls: bool = False,
    enable_thinking: bool = True,
    reasoning_effort: str | None = None,
) -> ChatTurn:
    """A chat turn of either integration: OpenAI-format messages and tools rendered through
    llama.cpp's chat layer (``chat_template``, else the model's), the tool choice checked
    against the tools' names."""
    names = [str(t.get("function", t).get("name")) for t in tools]
    return chat_format(session.model, chat_template).turn(
        list(messages),
        tools=list(tools),
        tool_choice=normalize_tool_choice(tool_choice, names),
        parallel_tool_calls=parallel_tool_calls,
        enable_thinking=enable_thinking,
        reasoning_effort=reasoning_effort,
    )
