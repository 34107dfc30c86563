"""Engine-facing logic shared by the LangChain and LlamaIndex integrations.

Both frameworks need the same things from the engine: a lazily loaded session
shared between instances with the same settings, per-call options merged over
instance defaults (stop sequences included), chat prompts rendered with the
GGUF's template, tool calls produced under a JSON-schema grammar, and the stats
payload. They live here once; the framework modules only adapt types.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from . import _core
from .errors import InvalidOptionError
from .model import Model
from .options import GenerationOptions, normalize_stop
from .session import MTP
from .stats import STATS_KEY, MTPStats

__all__ = [
    "DEFAULT_CHAT_TEMPLATE",
    "OPTION_ATTRIBUTES",
    "STATS_KEY",
    "EngineSpec",
    "ToolSpec",
    "call_options",
    "chat_prompt",
    "format_tool_call",
    "get_session",
    "merge_options",
    "parse_tool_output",
    "partial_tool_response",
    "resolve_chat_template",
    "stats_payload",
    "tool_call_grammar",
    "tools_system_prompt",
]


@dataclasses.dataclass(frozen=True)
class EngineSpec:
    """Everything that identifies a loaded model + session. Equal specs share one session."""

    model_path: str | None = None
    """GGUF path; None = the built-in default model."""
    draft_model_path: str | None = None
    n_draft: int = 3
    n_ctx: int = 2048
    n_batch: int = 512
    n_threads: int | None = None
    n_threads_batch: int | None = None
    flash_attn: bool | None = None
    n_gpu_layers: int = 0
    use_mmap: bool = True

    def resolved_model_path(self) -> str:
        if self.model_path is None:
            from .default_model import default_model_path

            return str(default_model_path())
        return os.path.realpath(os.fspath(self.model_path))


_lock = threading.Lock()
_models: dict[tuple[str, bool, int, bool], Model] = {}
_sessions: dict[EngineSpec, MTP] = {}


def get_model(path: str, *, load_mtp: bool = True, n_gpu_layers: int = 0, use_mmap: bool = True) -> Model:
    """Load a model once per process and settings."""
    key = (os.path.realpath(path), load_mtp, n_gpu_layers, use_mmap)
    with _lock:
        model = _models.get(key)
    if model is None:
        model = Model.load(path, load_mtp=load_mtp, n_gpu_layers=n_gpu_layers, use_mmap=use_mmap)
        with _lock:
            model = _models.setdefault(key, model)
    return model


def get_session(spec: EngineSpec) -> MTP:
    """The session for ``spec``, created on first use and shared afterwards."""
    with _lock:
        session = _sessions.get(spec)
    if session is not None:
        return session
    model = get_model(spec.resolved_model_path(), n_gpu_layers=spec.n_gpu_layers, use_mmap=spec.use_mmap)
    draft = (
        get_model(os.fspath(spec.draft_model_path), n_gpu_layers=spec.n_gpu_layers, use_mmap=spec.use_mmap)
        if spec.draft_model_path
        else None
    )
    session = MTP(
        model,
        draft_model=draft,
        n_draft=spec.n_draft,
        n_ctx=spec.n_ctx,
        n_batch=spec.n_batch,
        n_threads=spec.n_threads,
        n_threads_batch=spec.n_threads_batch,
        flash_attn=spec.flash_attn,
    )
    with _lock:
        return _sessions.setdefault(spec, session)


def merge_options(
    defaults: Mapping[str, Any],
    call_kwargs: Mapping[str, Any],
    stop: str | Sequence[str] | None = None,
) -> GenerationOptions:
    """Instance defaults, overridden by per-call kwargs; a per-call ``stop`` wins
    over the instance's (no error when both are set). None values mean "unset"."""
    merged = {k: v for k, v in defaults.items() if v is not None}
    merged.update({k: v for k, v in call_kwargs.items() if v is not None})
    if stop is not None:
        merged["stop"] = normalize_stop(stop)
    return GenerationOptions.from_kwargs(None, **merged)


OPTION_ATTRIBUTES: dict[str, str] = {
    "max_tokens": "max_tokens",
    "temp": "temperature",
    "top_k": "top_k",
    "top_p": "top_p",
    "min_p": "min_p",
    "seed": "seed",
    "repeat_penalty": "repeat_penalty",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "penalty_last_n": "penalty_last_n",
    "stop": "stop",
    "grammar": "grammar",
    "emit_stats_every": "emit_stats_every",
    "timeout": "timeout",
}
"""Generation option -> the integration attribute holding its instance default
(both integrations name the temperature ``temperature``, as their frameworks do)."""


def call_options(
    instance: object,
    call_kwargs: Mapping[str, Any],
    stop: str | Sequence[str] | None = None,
) -> dict[str, Any]:
    """Keyword options for :meth:`MTP.stream_events` of one call: the instance's
    defaults (read through :data:`OPTION_ATTRIBUTES`), overridden by per-call
    kwargs (``temperature`` accepted for ``temp``; a per-call ``stop`` wins).
    Unknown options raise :class:`InvalidOptionError`."""
    defaults = {option: getattr(instance, attr, None) for option, attr in OPTION_ATTRIBUTES.items()}
    call = dict(call_kwargs)
    if "temperature" in call:
        call["temp"] = call.pop("temperature")
    if stop is None:
        stop = call.pop("stop", None)
    options = merge_options(defaults, call, stop)
    return {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}


def chat_prompt(model: Model, messages: Sequence[tuple[str, str]], chat_template: str | None = None) -> str:
    """Render ``(role, content)`` messages with the user's template, else the GGUF's own."""
    return model.apply_chat_template(list(messages), add_generation_prompt=True, chat_template=chat_template)


DEFAULT_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""ChatML, used for models whose GGUF carries no chat template (and no user template is given)."""


def resolve_chat_template(model: Model, chat_template: str | None = None) -> str:
    """The template a chat prompt is rendered with: the user's, else the GGUF's, else ChatML."""
    return chat_template or model.chat_template or DEFAULT_CHAT_TEMPLATE


def stats_payload(stats: MTPStats) -> dict[str, Any]:
    """The per-call stats as published by every integration under :data:`STATS_KEY`."""
    return stats.to_dict()


# ------------------------------------------------------------------ tools --


@dataclasses.dataclass(frozen=True)
class ToolSpec:
    """A callable tool as the model sees it: name, description, JSON schema of its arguments."""

    name: str
    description: str
    parameters: Mapping[str, Any]


def tools_system_prompt(tools: Sequence[ToolSpec]) -> str:
    """Text that tells the model which tools exist and the JSON shape of a call."""
    listing = json.dumps(
        [{"name": t.name, "description": t.description, "parameters": dict(t.parameters)} for t in tools]
    )
    return (
        "You can call these tools. To call one, answer with JSON "
        '{"name": <tool name>, "arguments": {...}}; to answer directly, use {"response": "<text>"}.\n'
        f"Tools: {listing}"
    )


def tool_call_grammar(tools: Sequence[ToolSpec], tool_choice: str | None = "auto") -> str:
    """A GBNF grammar whose every output parses as a tool call (or, for ``auto``,
    a direct ``{"response": ...}`` answer).

    ``tool_choice``: "auto" (call or answer), "any"/"required" (some tool),
    "none" (answer only) or a tool name (that tool).
    """
    if not tools:
        raise InvalidOptionError("tool calling needs at least one tool")
    names = [t.name for t in tools]
    choice = tool_choice or "auto"
    if choice in ("any", "required"):
        allowed = list(tools)
    elif choice in ("auto", "none"):
        allowed = [] if choice == "none" else list(tools)
    elif choice in names:
        allowed = [t for t in tools if t.name == choice]
    else:
        raise InvalidOptionError(f"tool_choice must be 'auto', 'any', 'none' or one of {names} (got {tool_choice!r})")
    variants: list[dict[str, Any]] = [
        {
            "type": "object",
            "properties": {"name": {"const": t.name}, "arguments": _object_schema(t.parameters)},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for t in allowed
    ]
    if choice in ("auto", "none"):
        variants.append(
            {
                "type": "object",
                "properties": {"response": {"type": "string"}},
                "required": ["response"],
                "additionalProperties": False,
            }
        )
    schema = variants[0] if len(variants) == 1 else {"oneOf": variants}
    return _compact(_core.json_schema_grammar(json.dumps(schema)))


def json_schema_grammar(schema: Mapping[str, Any]) -> str:
    """A GBNF grammar for JSON documents matching ``schema`` (structured output)."""
    return _compact(_core.json_schema_grammar(json.dumps(dict(schema))))


def parse_tool_output(text: str) -> tuple[str, list[dict[str, Any]]]:
    """Split grammar-constrained output into ``(content, tool_calls)``.

    A tool call is ``{"name", "arguments"}``; a direct answer is ``{"response"}``.
    """
    data = json.loads(text)
    if "response" in data:
        return str(data["response"]), []
    return "", [{"name": data["name"], "arguments": data.get("arguments") or {}}]


_SPACE_RULE = re.compile(r"^space ::= .*$", re.MULTILINE)


def _compact(grammar: str) -> str:
    """Allow at most one space between JSON tokens. llama.cpp's schema grammars also
    allow newlines and indentation, which small models fill until max_tokens runs out."""
    return _SPACE_RULE.sub('space ::= " "?', grammar)


def _object_schema(parameters: Mapping[str, Any]) -> dict[str, Any]:
    schema = dict(parameters) if parameters else {}
    schema.setdefault("type", "object")
    if "properties" not in schema:
        schema["properties"] = {}
    return schema


# ------------------------------------------- tool transcripts and streaming --


def format_tool_call(name: str, arguments: Mapping[str, Any]) -> str:
    """A past tool call as the model writes it under :func:`tool_call_grammar`
    (for rendering an assistant's earlier tool calls back into a chat prompt)."""
    return json.dumps({"name": name, "arguments": dict(arguments)})


def partial_tool_response(text: str) -> str | None:
    """The decoded answer so far when ``text`` is (a prefix of) a direct answer
    ``{"response": "..."}`` produced under :func:`tool_call_grammar`; None when
    it is (or may still become) a tool call.

    Lets integrations stream a direct answer token by token while tool calls
    stay hidden until they parse, and salvage an answer cut off by max_tokens.
    """
    match = _RESPONSE_OPENING.match(text)
    if match is None:
        return None
    body = text[match.end() :]
    i, safe = 0, 0
    while i < len(body):
        ch = body[i]
        if ch == '"':
            break
        if ch == "\\":
            width = 6 if body[i + 1 : i + 2] == "u" else 2
            if i + width > len(body):
                break
            i += width
        else:
            i += 1
        safe = i
    try:
        decoded = json.loads('"' + body[:safe] + '"')
    except ValueError:
        return None
    if decoded and "\ud800" <= decoded[-1] <= "\udbff":
        decoded = decoded[:-1]  # half of a surrogate pair: wait for the other half
    return str(decoded)


_RESPONSE_OPENING = re.compile(r'\s*\{\s*"response"\s*:\s*"')
