"""Chat turns in each model's own format, through llama.cpp's chat layer.

This is what both integrations (LangChain's ``ChatMTP``, LlamaIndex's ``MTPLLM``)
run a chat call through, as llama-server does with ``--jinja``:

* the model's template renders the messages (system, user, assistant with tool
  calls, tool results) and the tools, and says how the answer is written;
* the answer is generated under the chat layer's tool-call grammar: lazy (only
  once the model starts a call) for ``tool_choice="auto"``, from the first token
  for ``"required"`` or a named tool;
* the output, also while it streams, is parsed into content, reasoning and tool
  calls (:class:`ChatTurn`).

Templates the chat layer has no tool-call format for (the built-in default
model's ChatML, for one) take the JSON path instead: the tools are described in
the system prompt and a call is a ``{"name", "arguments"}`` JSON object forced by
a grammar built from the tools' schemas. :attr:`ChatFormat.tool_path` says which
path a model takes (``mtp-llm info`` prints it).

>>> fmt = ChatFormat(model)
>>> turn = fmt.turn([{"role": "user", "content": "Weather in Paris?"}], tools=[tool], tool_choice="required")
>>> for text in session.stream(turn.prompt, options=turn.options(GenerationOptions(temp=0))):
...     delta = turn.feed(text)
>>> turn.finish("eog").reply.tool_calls
"""

from __future__ import annotations

import dataclasses
import json
import re
import secrets
import string
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from . import _core
from .errors import ChatParseError, InvalidOptionError, InvalidPromptError, MTPError, ToolSchemaError
from .model import Model
from .options import ChatGrammar, GenerationOptions

__all__ = [
    "DEFAULT_CHAT_TEMPLATE",
    "ChatDelta",
    "ChatFormat",
    "ChatGrammar",
    "ChatReply",
    "ChatTurn",
    "ToolCall",
    "ToolCallDelta",
    "ToolPath",
    "chat_format",
    "new_tool_call_id",
    "normalize_tool_choice",
]

ToolPath = Literal["native", "json"]

DEFAULT_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""ChatML, used for models whose GGUF carries no chat template (and no user template is given)."""


_ID_ALPHABET = string.ascii_letters + string.digits


def new_tool_call_id() -> str:
    """The id given to a tool call whose format carries none (both integrations): nine
    letters and digits, the one shape every template accepts back (Mistral's require it)."""
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(9))


# ------------------------------------------------------------------ results --


@dataclasses.dataclass(frozen=True)
class ToolCall:
    """One parsed tool call."""

    id: str
    name: str
    arguments: dict[str, Any]

    def to_openai(self) -> dict[str, Any]:
        """The call as an OpenAI ``tool_calls`` entry (how messages carry it back to the template)."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments, ensure_ascii=False)},
        }


@dataclasses.dataclass(frozen=True)
class ToolCallDelta:
    """A streamed piece of tool call ``index``: its id and name come with its first piece."""

    index: int
    id: str | None
    name: str | None
    arguments: str
    """The next part of the arguments' JSON text."""


@dataclasses.dataclass(frozen=True)
class ChatDelta:
    """What one piece of output added to the parsed answer."""

    content: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCallDelta, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.content or self.reasoning or self.tool_calls)


@dataclasses.dataclass(frozen=True)
class ChatReply:
    """The parsed answer: content, reasoning and tool calls."""

    content: str
    reasoning: str
    tool_calls: tuple[ToolCall, ...]


@dataclasses.dataclass(frozen=True)
class ChatFinish:
    """The end of a turn: the last delta and the whole parsed answer."""

    delta: ChatDelta
    reply: ChatReply


# ----------------------------------------------------------------- formats --


class ChatFormat:
    """A model's chat template (``chat_template`` overrides the GGUF's; ChatML when
    neither exists) as llama.cpp's chat layer reads it."""

    def __init__(self, model: Model, chat_template: str | None = None) -> None:
        self.model = model
        self.template = chat_template or model.chat_template or DEFAULT_CHAT_TEMPLATE
        self._native = _core.ChatTemplates(model._native, self.template)
        self.tool_path: ToolPath = "native" if self._has_tool_format() else "json"
        """"native": tools in the model's own format; "json": the JSON fallback."""

    @property
    def caps(self) -> dict[str, bool]:
        """The template's capabilities as llama.cpp's Jinja analysis sees them."""
        return dict(self._native.caps)

    def _has_tool_format(self) -> bool:
        probe = [{"type": "function", "function": {"name": "probe", "parameters": {"type": "object", "properties": {}}}}]
        messages = json.dumps([{"role": "user", "content": "hi"}])
        return bool(self._native.apply(messages, json.dumps(probe), "required").grammar)

    def turn(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        tool_choice: str = "auto",
        parallel_tool_calls: bool = False,
        enable_thinking: bool = True,
        reasoning_effort: str | None = None,
    ) -> ChatTurn:
        """Render OpenAI-format ``messages`` and ``tools`` for the next assistant turn.

        ``tool_choice``: "auto", "required", "none" or a tool's name (see
        :func:`normalize_tool_choice`). ``reasoning_effort``: passed to templates that read it
        (``caps["supports_reasoning_effort"]``: gpt-oss, Hunyuan's ``"no_think"``/``"low"``/``"high"``,
        ...), as llama-server passes its request's field; None = the template's default. Raises :class:`~mtp_llm.ToolSchemaError`,
        :class:`~mtp_llm.ChatTemplateError` or :class:`~mtp_llm.InvalidOptionError`.
        """
        _check_depth(messages, "messages", InvalidPromptError)
        _check_depth(tools, "tools", ToolSchemaError)
        openai_tools = [_openai_tool(t) for t in tools]
        if self.tool_path == "json" and openai_tools:
            return _JsonTurn.start(self, messages, openai_tools, tool_choice)
        rendered = [_native_message(m) for m in messages]
        if openai_tools and not self.caps.get("supports_tools", True):
            # The template renders tool calls but never describes the tools: describe them here.
            rendered = _with_system_note(rendered, "Tools: " + json.dumps([t["function"] for t in openai_tools]))
        prompt = self._native.apply(
            json.dumps(rendered, ensure_ascii=False),
            json.dumps(openai_tools, ensure_ascii=False) if openai_tools else "",
            tool_choice,
            parallel_tool_calls,
            enable_thinking,
            reasoning_effort=reasoning_effort or "",
        )
        return _NativeTurn(prompt)

    def render(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """Just the prompt for ``messages`` (no tools)."""
        return self.turn(messages).prompt


_formats: dict[tuple[int, str | None], ChatFormat] = {}
_formats_lock = threading.Lock()


def chat_format(model: Model, chat_template: str | None = None) -> ChatFormat:
    """The :class:`ChatFormat` of a model and template, created once per process."""
    key = (id(model._native), chat_template)
    with _formats_lock:
        found = _formats.get(key)
    if found is None or found.model._native is not model._native:
        found = ChatFormat(model, chat_template)
        with _formats_lock:
            _formats[key] = found
    return found


def normalize_tool_choice(choice: Any, names: Sequence[str]) -> str:
    """LangChain's and LlamaIndex's tool_choice forms -> "auto" | "required" | "none" | a tool name.

    Accepts None/"auto", True/"any"/"required", False/"none", a tool name, and
    ``{"type": "function", "function": {"name": ...}}`` / ``{"name": ...}``.
    """
    if choice is None or choice == "auto":
        return "auto"
    if choice is True or choice in ("any", "required"):
        return "required"
    if choice is False or choice == "none":
        return "none"
    if isinstance(choice, Mapping):
        name = (choice.get("function") or {}).get("name") or choice.get("name")
        if isinstance(name, str):
            choice = name
    if isinstance(choice, str) and choice in names:
        return choice
    raise InvalidOptionError(
        f"tool_choice must be 'auto', 'any'/'required', 'none' or one of the tools {list(names)} (got {choice!r})"
    )


# ------------------------------------------------------------------- turns --


class ChatTurn:
    """One assistant turn: the prompt, the options it is generated with, and its parser.

    Feed the generated text in order (:meth:`feed`), then call :meth:`finish`.
    """

    prompt: str
    """The rendered conversation, ending where the assistant's answer starts."""
    format: str
    """The chat layer's format name, or "json" on the JSON path."""
    supports_thinking: bool = False
    """The format has a reasoning section (parsed into ``reasoning``)."""

    def options(self, base: GenerationOptions) -> GenerationOptions:
        """``base`` with this turn's grammar and stop strings."""
        raise NotImplementedError

    def feed(self, text: str) -> ChatDelta:
        """Add generated text; what it added to the parsed answer (may be nothing yet)."""
        raise NotImplementedError

    def finish(self, finish_reason: str) -> ChatFinish:
        """Parse the whole output (cut off when ``finish_reason`` is "length")."""
        raise NotImplementedError


def _merge_options(base: GenerationOptions, grammar: str | ChatGrammar | None, stops: Sequence[str]) -> GenerationOptions:
    if grammar is not None and base.grammar is not None:
        raise InvalidOptionError("a grammar cannot be combined with tools: unbind the tools or drop the grammar")
    changes: dict[str, Any] = {}
    if grammar is not None:
        changes["grammar"] = grammar
    if stops:
        changes["stop"] = tuple(dict.fromkeys([*base.stop, *stops]))
    return dataclasses.replace(base, **changes) if changes else base


class _NativeTurn(ChatTurn):
    """A turn in the model's own format: the chat layer's grammar and parser."""

    def __init__(self, prompt: _core.ChatPrompt) -> None:
        self.prompt = prompt.prompt
        self.format = prompt.format
        self._grammar = ChatGrammar(
            grammar=prompt.grammar,
            lazy=prompt.grammar_lazy,
            trigger_words=tuple(prompt.trigger_words),
            trigger_patterns=tuple(prompt.trigger_patterns),
            preserved_tokens=tuple(prompt.preserved_tokens),
            generation_prompt=prompt.generation_prompt,
            thinking_start=prompt.thinking_start,
            thinking_end=tuple(prompt.thinking_end),
        )
        self._stops = tuple(prompt.additional_stops)
        self.supports_thinking = prompt.supports_thinking
        self.grammar = self._grammar
        self._parser = _core.ChatParser(prompt)
        self._text = ""
        self._sent = _Sent()

    def options(self, base: GenerationOptions) -> GenerationOptions:
        if base.grammar is not None and not self._grammar.grammar:
            # A user grammar on a turn without tool calls: it constrains the text as before.
            return _merge_options(base, None, self._stops)
        return _merge_options(base, self._grammar, self._stops)

    def feed(self, text: str) -> ChatDelta:
        if not text:
            return ChatDelta()
        self._text += text
        content, reasoning, calls = self._parser.parse(self._text, True)
        return self._sent.advance(content, reasoning, calls, final=False)

    def finish(self, finish_reason: str) -> ChatFinish:
        try:
            content, reasoning, calls = self._parser.parse(self._text, finish_reason == "length")
        except ChatParseError:
            # The grammar lets through whitespace the parser does not expect (seen with
            # random-weight models); the parse as far as it goes keeps the calls.
            content, reasoning, calls = self._parser.parse(self._text, True)
        delta = self._sent.advance(content, reasoning, calls, final=True)
        return ChatFinish(delta, self._sent.reply())


class _Sent:
    """What has been streamed so far, and the deltas that extend it.

    Content and reasoning stream as the partial parses extend them (llama.cpp's
    server streams the same diffs; a part that does not extend what was sent waits
    until it does). A tool call streams its id and name once its arguments have
    begun, and its arguments once the call is complete (a later call began, or the
    output ended): partial arguments are rewritten as they grow (a tagged value
    turns from a string into a number), so streaming them early could not join up.
    """

    def __init__(self) -> None:
        self.content = ""
        self.reasoning = ""
        self.ids: list[str] = []
        self.done = 0
        self.final_calls: list[tuple[str, str, str]] = []

    def advance(self, content: str, reasoning: str, calls: list[tuple[str, str, str]], *, final: bool) -> ChatDelta:
        d_content = _extension(self.content, content)
        d_reasoning = _extension(self.reasoning, reasoning)
        self.content += d_content
        self.reasoning += d_reasoning
        deltas = []
        for index, (name, arguments, call_id) in enumerate(calls):
            complete = final or index + 1 < len(calls)
            if index == len(self.ids):
                if not name or not (arguments or complete):
                    break  # the name may still be being written
                self.ids.append(call_id or new_tool_call_id())
                deltas.append(ToolCallDelta(index, self.ids[index], name, arguments if complete else ""))
                self.done += complete
            elif index == self.done and complete:
                deltas.append(ToolCallDelta(index, None, None, arguments))
                self.done += 1
        if final:
            self.final_calls = calls
        return ChatDelta(d_content, d_reasoning, tuple(deltas))

    def reply(self) -> ChatReply:
        calls = []
        for index, (name, arguments, _) in enumerate(self.final_calls):
            call_id = self.ids[index] if index < len(self.ids) else new_tool_call_id()
            calls.append(ToolCall(call_id, name, _arguments(name, arguments)))
        return ChatReply(self.content, self.reasoning, tuple(calls))


def _extension(sent: str, now: str) -> str:
    return now[len(sent) :] if now.startswith(sent) else ""


def _arguments(name: str, text: str) -> dict[str, Any]:
    try:
        value = _loads_bounded(text) if text.strip() else {}
    except ValueError:
        return {}
    if not isinstance(value, dict):
        raise InvalidOptionError(f"tool '{name}' was called with arguments that are not a JSON object: {text!r}")
    return value


# ---------------------------------------------------------- the JSON path --


class _JsonTurn(ChatTurn):
    """Tools on a template without a tool-call format: described in the system prompt,
    a call is ``{"name", "arguments"}`` and a direct answer ``{"response"}``, both
    forced by a grammar built from the tools' schemas."""

    format = "json"

    @classmethod
    def start(
        cls, fmt: ChatFormat, messages: Sequence[Mapping[str, Any]], tools: list[dict[str, Any]], tool_choice: str
    ) -> ChatTurn:
        functions = [t["function"] for t in tools]
        names = [f["name"] for f in functions]
        if tool_choice not in ("auto", "required", "none") and tool_choice not in names:
            normalize_tool_choice(tool_choice, names)  # raises, naming the tools
        # "none" keeps the tools in the prompt (only the grammar forbids calls), so the prompt of
        # an agent's answering turn extends its calling turn's and reuses its cached prefix.
        flat = _with_system_note([_json_path_message(m) for m in messages], _tools_system_prompt(functions))
        turn = cls()
        turn.prompt = fmt._native.apply(json.dumps(flat, ensure_ascii=False)).prompt
        turn._grammar = _tool_call_grammar(functions, tool_choice)
        turn._text = ""
        turn._sent = 0
        return turn

    _grammar: str
    _text: str
    _sent: int

    def options(self, base: GenerationOptions) -> GenerationOptions:
        return _merge_options(base, self._grammar, ())

    def feed(self, text: str) -> ChatDelta:
        self._text += text
        answer = _partial_response(self._text)
        if answer is None or len(answer) <= self._sent:
            return ChatDelta()
        delta, self._sent = answer[self._sent :], len(answer)
        return ChatDelta(content=delta)

    def finish(self, finish_reason: str) -> ChatFinish:
        try:
            data = _loads_bounded(self._text)
        except ValueError:
            data = None
        if isinstance(data, dict) and "name" in data:
            call = ToolCall(new_tool_call_id(), str(data["name"]), dict(data.get("arguments") or {}))
            delta = ToolCallDelta(0, call.id, call.name, json.dumps(call.arguments, ensure_ascii=False))
            return ChatFinish(ChatDelta(tool_calls=(delta,)), ChatReply("", "", (call,)))
        if isinstance(data, dict) and "response" in data:
            answer = str(data["response"])
        else:
            # Cut off before the JSON closed (max_tokens, stop, timeout): the answer so far,
            # else the raw output (finish_reason says why).
            partial = _partial_response(self._text)
            answer = partial if partial is not None else self._text
            if partial is None:
                self._sent = 0
        return ChatFinish(ChatDelta(content=answer[self._sent :]), ChatReply(answer, "", ()))


def _json_path_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A message for a template without tool support: earlier tool calls written back
    as the JSON the model produces them in."""
    role = str(message.get("role", "user"))
    content = _text_content(message.get("content"))
    calls = message.get("tool_calls") or []
    if role == "assistant" and calls:
        # Compact, as the call grammar writes it: the rendered call then matches the cached tokens.
        written = [
            json.dumps(
                {"name": c["function"]["name"], "arguments": _loads(c["function"].get("arguments"))},
                ensure_ascii=False,
                separators=(",", ":"),
            )
            for c in calls
        ]
        content = "\n".join([content, *written]).strip()
    return {"role": role, "content": content}


def _with_system_note(messages: list[dict[str, Any]], note: str) -> list[dict[str, Any]]:
    """``messages`` with ``note`` appended to the system message (one is added if needed)."""
    if messages and messages[0]["role"] == "system":
        return [{**messages[0], "content": f"{messages[0]['content']}\n\n{note}"}, *messages[1:]]
    return [{"role": "system", "content": note}, *messages]


def _loads(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return _loads_bounded(arguments) if arguments.strip() else {}
        except ValueError:
            return arguments
    return arguments or {}


def _tools_system_prompt(functions: Sequence[Mapping[str, Any]]) -> str:
    listing = json.dumps(
        [{"name": f["name"], "description": f.get("description", ""), "parameters": f.get("parameters") or {}}
         for f in functions]
    )
    return (
        "You can call these tools. To call one, answer with JSON "
        '{"name": <tool name>, "arguments": {...}}; to answer directly, use {"response": "<text>"}.\n'
        f"Tools: {listing}"
    )


def _tool_call_grammar(functions: Sequence[Mapping[str, Any]], tool_choice: str) -> str:
    if tool_choice == "none":
        allowed: Sequence[Mapping[str, Any]] = []
    elif tool_choice in ("auto", "required"):
        allowed = functions
    else:
        allowed = [f for f in functions if f["name"] == tool_choice]
    variants: list[dict[str, Any]] = [
        {
            "type": "object",
            "properties": {"name": {"const": f["name"]}, "arguments": _object_schema(f.get("parameters") or {})},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for f in allowed
    ]
    if tool_choice in ("auto", "none"):
        variants.append(
            {
                "type": "object",
                "properties": {"response": {"type": "string"}},
                "required": ["response"],
                "additionalProperties": False,
            }
        )
    return json_schema_grammar(variants[0] if len(variants) == 1 else {"oneOf": variants})


def json_schema_grammar(schema: Mapping[str, Any], *, whitespace: Literal["none", "single"] = "none") -> str:
    """A GBNF grammar for JSON documents matching ``schema``.

    ``whitespace="none"`` (the default) writes compact JSON (``{"a":1,"b":[2,3]}``): with no
    free whitespace, keys and punctuation are forced, so grammar-forced drafting
    (``SessionOptions.grammar_drafts``) drafts them without a head pass. ``"single"`` allows
    one optional space where JSON allows whitespace.
    """
    if whitespace not in ("none", "single"):
        raise InvalidOptionError(f'whitespace must be "none" or "single" (got {whitespace!r})')
    _check_depth(schema, "the JSON schema", ToolSchemaError)
    space = 'space ::= ""' if whitespace == "none" else 'space ::= " "?'
    if not isinstance(schema, (Mapping, bool)):
        raise ToolSchemaError(f"a JSON schema is an object or a boolean (got {type(schema).__name__})")
    document = schema if isinstance(schema, bool) else dict(schema)
    grammar = _SPACE_RULE.sub(space, _core.json_schema_grammar(json.dumps(document)))
    return grammar.replace(_UNBOUNDED_EXPONENT, _BOUNDED_EXPONENT)


# llama.cpp's schema grammars allow newlines and indentation, which small models fill until max_tokens runs out.
_SPACE_RULE = re.compile(r"^space ::= .*$", re.MULTILINE)
# Their exponents take up to 16 digits: "1e400" parses as inf. Two digits keep every number finite.
_UNBOUNDED_EXPONENT = "([eE] [-+]? integral-part)?"
_BOUNDED_EXPONENT = "([eE] [-+]? [0-9] [0-9]?)?"


JSON_DEPTH = 128
"""How deep messages, tools, schemas and parsed output may nest (the engine's bound: llama.cpp's
chat layer and Python's json module recurse on each level)."""


def _check_depth(value: Any, what: str, error: type[MTPError]) -> None:
    """Raise ``error`` when ``value`` (dicts, lists, tuples) nests deeper than :data:`JSON_DEPTH`;
    iterative, so a value of any depth is measured."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth >= JSON_DEPTH:
            raise error(f"{what} nest over {JSON_DEPTH} deep, the limit")
        stack.extend((child, depth + 1) for child in children)


def _text_depth(text: str) -> int:
    """The deepest nesting of brackets in ``text``, strings or not (an upper bound of its JSON depth)."""
    depth = deepest = 0
    for match in _BRACKETS.finditer(text):
        if match.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif depth:
            depth -= 1
    return deepest


_BRACKETS = re.compile(r"[\[\]{}]")


def _loads_bounded(text: str) -> Any:
    """``json.loads`` of model output, ChatParseError when it nests deeper than :data:`JSON_DEPTH`."""
    if _text_depth(text) > JSON_DEPTH:
        raise ChatParseError(f"the output nests brackets over {JSON_DEPTH} deep, the limit the chat parser reads")
    return json.loads(text)


def _object_schema(parameters: Mapping[str, Any]) -> dict[str, Any]:
    schema = dict(parameters)
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema


def _partial_response(text: str) -> str | None:
    """The decoded answer so far when ``text`` is (a prefix of) ``{"response": "..."}``;
    None when it is (or may still become) a tool call."""
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


# ---------------------------------------------------------------- messages --


def _openai_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI tool dict (``{"type": "function", "function": {...}}``; a bare function is wrapped)."""
    if not isinstance(tool, Mapping):
        raise ToolSchemaError(f"a tool must be a dict {{'type': 'function', 'function': {{'name': ...}}}} (got {tool!r:.80})")
    function = tool.get("function", tool)
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise ToolSchemaError(f"a tool needs a name (got {dict(tool)!r:.200})")
    if not isinstance(function.get("parameters", {}), Mapping):
        raise ToolSchemaError(f"tool {function['name']!r}: parameters must be a JSON schema object (a dict)")
    return {"type": "function", "function": dict(function)}


def _text_content(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = [p if isinstance(p, str) else p.get("text", "") for p in content if isinstance(p, (str, Mapping))]
        return "".join(str(p) for p in parts)
    return str(content)


def _native_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI-format message as the chat layer parses it (text content, string arguments)."""
    out: dict[str, Any] = {"role": str(message.get("role", "user")), "content": _text_content(message.get("content"))}
    calls = message.get("tool_calls")
    if calls:
        out["tool_calls"] = [
            {
                "id": c.get("id", ""),
                "type": "function",
                "function": {
                    "name": c["function"]["name"],
                    "arguments": c["function"].get("arguments")
                    if isinstance(c["function"].get("arguments"), str)
                    else json.dumps(c["function"].get("arguments") or {}, ensure_ascii=False),
                },
            }
            for c in calls
        ]
    for key in ("tool_call_id", "name", "reasoning_content"):
        if message.get(key):
            out[key] = str(message[key])
    return out
