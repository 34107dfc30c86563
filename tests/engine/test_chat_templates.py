"""Every chat template in the pinned llama.cpp tree (``models/templates/``, read at test time),
carried by a tiny random-weight model: rendered, generated and parsed through llama.cpp's
chat layer (:mod:`mtp_llm.chat`), with MTP drafting on.

Templates the chat layer has a tool-call format for take the native path; the others the
JSON path. The tool has one integer enum argument: a random model completes it in every
format (a string value is free text in the tagged formats).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mtp_llm import MTP, GenerationOptions, Model, TokenEvent
from mtp_llm.chat import ChatFormat, ChatTurn, ToolCallDelta, chat_format

from tests.helpers import THREADS
from tests.helpers.templates import TEMPLATE_DIR, TEMPLATES, TOOL


# Templates the chat layer has no tool-call format for: they take the JSON path.
JSON_PATH = {
    "HuggingFaceTB-SmolLM3-3B",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
    "google-gemma-2-2b-it",
    "ibm-granite-granite-3.3-2B-Instruct",
    "llama-cpp-rwkv-world",
    "microsoft-Phi-3.5-mini-instruct",
}

# Every format's forced call is finished by a random-weight model: mtp_llm narrows the chat layer's
# grammar where it leaves a part of the call free (csrc/chat_grammar.cpp), and reasoning_budget=8
# closes the reasoning where the format has it.
REASONING_BUDGET = 8
"""Reasoning tokens a forced call may start with: the random model would reason until max_tokens."""

OTHER_TOOL = {
    "type": "function",
    "function": {"name": "get_time", "description": "Local time", "parameters": {"type": "object", "properties": {}}},
}
# The tool with an optional argument before the required one.
TWO_ARGUMENTS: dict[str, Any] = json.loads(json.dumps(TOOL))
TWO_ARGUMENTS["function"]["parameters"]["properties"] = {
    "unit": {"type": "integer", "enum": [0, 1], "description": "0 Celsius, 1 Fahrenheit"},
    **TOOL["function"]["parameters"]["properties"],  # type: ignore[index]
}
QUESTION = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}]


def _format(paths: dict[str, Path], name: str) -> ChatFormat:
    return chat_format(Model.load(paths[name]))


def _generate(
    fmt: ChatFormat, turn: ChatTurn, max_tokens: int = 400, reasoning_budget: int | None = None
) -> tuple[list[ToolCallDelta], str, object]:
    session = MTP(fmt.model, n_draft=3, n_ctx=8192, n_threads=THREADS)
    deltas: list[ToolCallDelta] = []
    reason = "length"
    budget = reasoning_budget if reasoning_budget is not None else REASONING_BUDGET if turn.supports_thinking else -1
    options = turn.options(GenerationOptions(temp=0, max_tokens=max_tokens, reasoning_budget=budget))
    for event in session.stream_events(turn.prompt, options=options):
        if type(event).__name__ == "TokenEvent":
            deltas += turn.feed(event.text).tool_calls  # type: ignore[attr-defined]
        elif type(event).__name__ == "DoneEvent":
            reason = event.finish_reason  # type: ignore[attr-defined]
    finish = turn.finish(reason)
    deltas += finish.delta.tool_calls
    return deltas, reason, finish.reply


def test_the_tree_has_templates() -> None:
    assert len(TEMPLATES) >= 60, TEMPLATE_DIR
    assert JSON_PATH <= set(TEMPLATES)


@pytest.mark.parametrize("name", TEMPLATES)
def test_tool_path(template_models: dict[str, Path], name: str) -> None:
    assert _format(template_models, name).tool_path == ("json" if name in JSON_PATH else "native")


NATIVE = [n for n in TEMPLATES if n not in JSON_PATH]


@pytest.mark.parametrize("name", NATIVE)
def test_tools_and_results_render_in_the_template(template_models: dict[str, Path], name: str) -> None:
    fmt = _format(template_models, name)
    turn = fmt.turn(QUESTION, tools=[TOOL, OTHER_TOOL], tool_choice="auto")
    assert "get_weather" in turn.prompt and "get_time" in turn.prompt and "Weather in Paris?" in turn.prompt
    assert "forecast length" in turn.prompt  # the schema too
    call = {"id": "abc123XYZ", "type": "function", "function": {"name": "get_weather", "arguments": '{"days": 5}'}}
    history = [
        *QUESTION,
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "abc123XYZ", "name": "get_weather", "content": "sunny-42"},
    ]
    rendered = fmt.turn(history, tools=[TOOL]).prompt
    assert "sunny-42" in rendered


# Templates whose turn has no reasoning section though their format names reasoning tags: LFM2's
# that never think (the chat layer's parser reads reasoning only where the template's source has
# "<think>"); what a model writes between the tags is content, and the turn says it has no reasoning.
NO_REASONING = {"LFM2-8B-A1B", "LFM2.5-Instruct"}
# Templates that reason at a reasoning_effort other than their default (Hy3's "no_think" closes the
# reasoning section in the generation prompt).
REASONING_EFFORT = {"tencent-Hy3": "high"}


@pytest.mark.parametrize("name", NATIVE)
def test_reasoning_is_split_where_the_format_has_it(template_models: dict[str, Path], name: str) -> None:
    fmt = _format(template_models, name)
    turn = fmt.turn(QUESTION, tools=[TOOL], enable_thinking=True, reasoning_effort=REASONING_EFFORT.get(name))
    grammar = turn.grammar  # type: ignore[attr-defined]
    if not grammar.thinking_end:
        pytest.skip("the format has no reasoning section")
    opened = grammar.thinking_start and grammar.thinking_start in grammar.generation_prompt
    text = ("" if opened else grammar.thinking_start) + "plan" + grammar.thinking_end[0] + "answer"
    streamed = [turn.feed(piece) for piece in text]
    reply = turn.finish("eog").reply
    if name in NO_REASONING:
        assert not turn.supports_thinking and reply.reasoning == "" and "plan" in reply.content
        return
    assert turn.supports_thinking
    assert reply.reasoning.strip().endswith("plan") and "plan" not in reply.content
    assert "".join(d.reasoning for d in streamed) == reply.reasoning[: len("".join(d.reasoning for d in streamed))]


def test_a_reasoning_effort_reaches_the_template(template_models: dict[str, Path]) -> None:
    fmt = _format(template_models, "tencent-Hy3")
    assert fmt.caps["supports_reasoning_effort"]
    default, high = (fmt.turn(QUESTION, reasoning_effort=effort) for effort in (None, "high"))
    assert default.prompt.endswith("<think:opensource></think:opensource>") and not default.supports_thinking
    assert high.prompt.endswith("<think:opensource>") and high.supports_thinking


@pytest.mark.parametrize("name", TEMPLATES)
def test_forced_call_is_generated_streamed_and_parsed(template_models: dict[str, Path], name: str) -> None:
    fmt = _format(template_models, name)
    turn = fmt.turn(QUESTION, tools=[TOOL, OTHER_TOOL], tool_choice="get_weather", enable_thinking=False)
    deltas, reason, reply = _generate(fmt, turn)
    calls = reply.tool_calls  # type: ignore[attr-defined]
    assert calls and calls[0].name == "get_weather" and calls[0].arguments["days"] in (2, 5), (reason, calls)
    joined: dict[int, dict[str, str]] = {}
    for d in deltas:
        entry = joined.setdefault(d.index, {"id": d.id or "", "name": d.name or "", "arguments": ""})
        entry["arguments"] += d.arguments
    assert [(e["id"], e["name"], json.loads(e["arguments"])) for e in joined.values()] == [
        (c.id, c.name, c.arguments) for c in calls
    ]


# Templates whose generation prompt opens the reasoning section and whose random model's first
# reasoning tokens are whole characters (the budget sampler lets a split character finish first).
BUDGET_TEMPLATES = ["Qwen3.5-4B", "llama-cpp-deepseek-r1"]


def _reason(fmt: ChatFormat, budget: int, n_draft: int, tools: bool = False) -> tuple[list[int], ChatTurn, int]:
    """Token ids of a greedy answer with ``reasoning_budget=budget`` (with a tool: under the lazy
    tool-call grammar), its turn (fed), and the drafts made."""
    turn = fmt.turn(QUESTION, tools=[TOOL] if tools else (), enable_thinking=True)
    session = MTP(fmt.model, n_draft=n_draft, n_ctx=2048, n_threads=THREADS)
    ids = []
    options = turn.options(GenerationOptions(temp=0, max_tokens=40, reasoning_budget=budget))
    for event in session.stream_events(turn.prompt, options=options):
        if isinstance(event, TokenEvent):
            ids.append(event.id)
            turn.feed(event.text)
    return ids, turn, session.last_stats.drafts_generated


@pytest.mark.parametrize("tools", [False, True], ids=["text", "tools-auto"])
@pytest.mark.parametrize("name", BUDGET_TEMPLATES)
def test_reasoning_budget_bounds_the_reasoning_tokens(template_models: dict[str, Path], name: str, tools: bool) -> None:
    fmt = _format(template_models, name)
    grammar = fmt.turn(QUESTION, enable_thinking=True).grammar  # type: ignore[attr-defined]
    assert grammar.generation_prompt.rstrip().endswith(grammar.thinking_start)  # opened by the template
    end = fmt.model.tokenize(grammar.thinking_end[0], add_special=False)  # the tag the sampler forces

    def contains(ids: list[int], tag: list[int]) -> bool:
        return any(ids[i : i + len(tag)] == tag for i in range(len(ids)))

    unlimited, turn, _ = _reason(fmt, -1, n_draft=3, tools=tools)
    assert not contains(unlimited, end) and turn.finish("length").reply.content == ""  # reasons until max_tokens
    for budget in (0, 1, 3, 8):
        ids, turn, drafted = _reason(fmt, budget, n_draft=3, tools=tools)
        assert ids[:budget] == unlimited[:budget]  # the model's own reasoning, then the end tag forced
        assert ids[budget : budget + len(end)] == end and not contains(ids[: budget + len(end) - 1], end), budget
        reply = turn.finish("length").reply
        assert reply.reasoning.strip() == fmt.model.detokenize(ids[:budget]).strip() and reply.content
        plain, _, plain_drafted = _reason(fmt, budget, n_draft=0, tools=tools)
        assert drafted > 0 and plain_drafted == 0 and ids == plain  # MTP stays lossless under the budget


def test_a_generated_mistral_call_id_renders_back(template_models: dict[str, Path]) -> None:
    # The chat layer's grammar lets the id after [CALL_ID] be any text; Mistral's templates take
    # back nine letters and digits only, which the grammar mtp_llm passes asks for.
    fmt = _format(template_models, "Mistral-Small-3.2-24B-Instruct-2506")
    turn = fmt.turn(QUESTION, tools=[TOOL], tool_choice="get_weather")
    _, _, reply = _generate(fmt, turn, max_tokens=60)
    (call,) = reply.tool_calls  # type: ignore[attr-defined]
    assert len(call.id) == 9 and call.id.isalnum()
    history = [*QUESTION, {"role": "assistant", "content": "", "tool_calls": [call.to_openai()]},
               {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": "sunny-42"}]
    assert "sunny-42" in fmt.turn(history, tools=[TOOL]).prompt


def test_reasoning_budget_zero_leaves_the_reasoning_out_of_a_forced_call(template_models: dict[str, Path]) -> None:
    # Kimi-K2's grammar allows an optional "<think>" section before the call, written in the tag's
    # own tokens (the ones the budget sampler counts from); with a budget of 0, or thinking off, it
    # is left out.
    fmt = _format(template_models, "Kimi-K2-Instruct")

    def output(budget: int, thinking: bool = True) -> str:
        turn = fmt.turn(QUESTION, tools=[TOOL], tool_choice="get_weather", enable_thinking=thinking)
        options = turn.options(GenerationOptions(temp=0, max_tokens=64, reasoning_budget=budget))
        return MTP(fmt.model, n_draft=3, n_ctx=2048, n_threads=THREADS).generate(turn.prompt, options=options)

    unlimited, bounded = output(-1), output(8)
    assert unlimited.startswith("<think>") and "</think>" not in unlimited  # reasons until max_tokens
    assert bounded.startswith("<think>") and "</think><|tool_call_begin|>functions.get_weather:" in bounded[: len("<think>") + 60]
    assert output(0).startswith("<|tool_call_begin|>functions.get_weather:")
    assert output(-1, thinking=False).startswith("<|tool_call_begin|>functions.get_weather:")  # thinking off


def test_the_reasoning_tag_is_written_in_its_own_tokens(template_models: dict[str, Path]) -> None:
    # The random model spells "<think>" in other tokens when the grammar's literal lets it; the
    # grammar mtp_llm passes takes the tag's tokens, so the budget sampler sees the tag and closes it.
    fmt = _format(template_models, "Kimi-K2-Thinking")
    turn = fmt.turn(QUESTION, tools=[TOOL], tool_choice="required", enable_thinking=True)
    options = turn.options(GenerationOptions(temp=0, max_tokens=400, reasoning_budget=REASONING_BUDGET))
    ids = [e.id for e in MTP(fmt.model, n_draft=3, n_ctx=2048, n_threads=THREADS).stream_events(turn.prompt, options=options)
           if isinstance(e, TokenEvent)]
    tag = fmt.model.tokenize("<think>", add_special=False)
    end = fmt.model.tokenize("</think>", add_special=False)
    assert ids[: len(tag)] == tag and ids[len(tag) + REASONING_BUDGET : len(tag) + REASONING_BUDGET + len(end)] == end
    turn.feed(fmt.model.detokenize(ids))
    (call,) = turn.finish("eog").reply.tool_calls  # type: ignore[attr-defined]
    assert call.name == "get_weather" and call.arguments["days"] in (2, 5)


# The formats whose grammar mtp_llm narrows beyond the chat layer's (csrc/chat_grammar.cpp).
NARROWED = ["Kimi-K2-Thinking", "Kimi-K3", "muse-glimmer", "openai-gpt-oss-120b", "LFM2.5-Instruct",
            "google-gemma-4-31B-it", "openbmb-MiniCPM5-1B", "Qwen3.5-4B"]


@pytest.mark.parametrize("name", NARROWED)
def test_greedy_mtp_equals_plain_decoding_under_the_narrowed_grammars(template_models: dict[str, Path], name: str) -> None:
    fmt = _format(template_models, name)
    tagged = bool(fmt.turn(QUESTION, tools=[TOOL], tool_choice="required").grammar.thinking_start)  # type: ignore[attr-defined]
    # With reasoning where a budget can bound it (the format has reasoning tags).
    turn = fmt.turn(QUESTION, tools=[TWO_ARGUMENTS, OTHER_TOOL], tool_choice="required", enable_thinking=tagged)
    budget = REASONING_BUDGET if turn.supports_thinking else -1
    options = turn.options(GenerationOptions(temp=0, max_tokens=400, reasoning_budget=budget))

    def ids(n_draft: int) -> tuple[list[int], int]:
        session = MTP(fmt.model, n_draft=n_draft, n_ctx=4096, n_threads=THREADS)
        out = [e.id for e in session.stream_events(turn.prompt, options=options) if isinstance(e, TokenEvent)]
        return out, session.last_stats.drafts_generated

    (mtp, drafted), (plain, _) = ids(3), ids(0)
    assert drafted > 0 and mtp == plain
    turn.feed(fmt.model.detokenize(mtp))
    calls = turn.finish("eog").reply.tool_calls  # type: ignore[attr-defined]
    assert calls and calls[0].name in ("get_weather", "get_time")


def test_reasoning_budget_is_checked_by_the_engine_too(template_models: dict[str, Path]) -> None:
    from mtp_llm import InvalidOptionError

    fmt = _format(template_models, "Qwen3.5-4B")
    turn = fmt.turn(QUESTION, enable_thinking=True)
    options = turn.options(GenerationOptions(max_tokens=4))
    object.__setattr__(options, "reasoning_budget", -2)  # past the Python check
    with pytest.raises(InvalidOptionError, match=r"reasoning_budget must be -1 \(unlimited\), 0 \(no reasoning\)"):
        MTP(fmt.model, n_ctx=512, n_threads=THREADS).generate(turn.prompt, options=options)


def test_bad_input_raises_an_mtp_error_naming_the_tool_or_template(template_models: dict[str, Path]) -> None:
    from mtp_llm import ChatTemplateError, InvalidOptionError, ToolSchemaError

    model = Model.load(template_models["Qwen3.5-4B"])
    fmt = chat_format(model)
    broken = {"type": "function", "function": {"name": "broken", "parameters": {"properties": {"a": {"$ref": "#/x"}}}}}
    with pytest.raises(ToolSchemaError, match="tool 'broken'"):
        fmt.turn(QUESTION, tools=[TOOL, broken])
    with pytest.raises(InvalidOptionError, match="'get_rain', which is not among the tools given \\('get_weather'\\)"):
        fmt.turn(QUESTION, tools=[TOOL], tool_choice="get_rain")
    failing = "{% for m in messages %}{{ raise_exception('no such role') }}{% endfor %}"
    with pytest.raises(ChatTemplateError, match="the chat_template given for .*Qwen3.5-4B.gguf' failed to render"):
        ChatFormat(model, failing).turn(QUESTION, tools=[TOOL])
    with pytest.raises(ChatTemplateError, match="does not parse"):
        ChatFormat(model, "{% for m in messages %")


def test_info_prints_the_tool_path(template_models: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    from mtp_llm.cli import main

    for name, path in [("Qwen3.5-4B", "native"), ("google-gemma-2-2b-it", "json")]:
        assert main(["info", "--model", str(template_models[name])]) == 0
        assert json.loads(capsys.readouterr().out)["tool_calls"].startswith(path)


@pytest.mark.parametrize("name", TEMPLATES)
def test_a_forced_call_has_each_argument_once_and_the_required_ones(template_models: dict[str, Path], name: str) -> None:
    # An optional argument before the required one: the narrowed grammars write the arguments
    # in the schema's order, each at most once, the required ones first.
    fmt = _format(template_models, name)
    turn = fmt.turn(QUESTION, tools=[TWO_ARGUMENTS], tool_choice="required", enable_thinking=False)
    _, reason, reply = _generate(fmt, turn)
    calls = reply.tool_calls  # type: ignore[attr-defined]
    assert calls and calls[0].name == "get_weather", (reason, calls)
    arguments = calls[0].arguments
    assert arguments["days"] in (2, 5) and set(arguments) <= {"days", "unit"} and arguments.get("unit", 0) in (0, 1)


COMPLEX_TOOL = {
    "type": "function",
    "function": {
        "name": "book.trip-v2",
        "description": "Book a trip",
        "parameters": {
            "type": "object",
            "$defs": {"point": {"type": "object", "properties": {"lat": {"type": "number"}}, "required": ["lat"]}},
            "properties": {
                "city name": {"type": "string", "enum": ["Paris", 'K\u00f6ln "x"']},
                "when": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
                "n": {"type": "integer", "minimum": 1, "maximum": 9},
                "ok": {"type": "boolean"},
                "where": {"$ref": "#/$defs/point"},
                "options": {"type": "object", "properties": {"a:b": {"type": "integer"}, "c": {"type": ["string", "null"]}}},
                "free": {},
            },
            "required": ["n", "where"],
        },
    },
}
# Formats whose narrowed grammar adds rules from the tools' schemas, with a piece of it.
SCHEMA_RULES = {"Kimi-K3": ' type=\\"number\\""', "LFM2.5-Instruct": "mtp-", "google-gemma-4-31B-it": '"n:" mtp-'}


@pytest.mark.parametrize("name", NARROWED)
def test_narrowed_grammars_take_any_schema(template_models: dict[str, Path], name: str) -> None:
    # Names with dots and spaces, enums with quotes, anyOf, arrays, $ref, nested objects, an
    # untyped value, optional arguments only: the narrowed grammar parses and generation runs.
    fmt = _format(template_models, name)
    optional = {"type": "function", "function": {"name": "opt", "parameters": {
        "type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "boolean"}}}}}
    for choice in ("required", "auto"):
        turn = fmt.turn(QUESTION, tools=[COMPLEX_TOOL, optional, OTHER_TOOL], tool_choice=choice, enable_thinking=False)
        if choice == "required" and name in SCHEMA_RULES:
            assert SCHEMA_RULES[name] in turn.grammar.grammar  # type: ignore[attr-defined]
        options = turn.options(GenerationOptions(temp=0, max_tokens=8))
        MTP(fmt.model, n_draft=2, n_ctx=4096, n_threads=THREADS).generate(turn.prompt, options=options)


# A tool whose arguments take each kind the chat layer's formats write: a string enum, a string
# const, a bounded integer, a boolean.
KINDS_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather forecast of a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "enum": ["Paris", "London"]},
                "source": {"type": "string", "const": "api"},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "alerts": {"type": "boolean"},
            },
            "required": ["city", "source", "days", "alerts"],
        },
    },
}
# Formats whose grammar still leaves a string value free (docs/chat.md, "Schema-exact arguments").
FREE_STRING_FORMATS = {
    "LFM2-8B-A1B", "LFM2.5-8B-A1B", "LFM2.5-Instruct", "muse-glimmer",
    "openbmb-MiniCPM5-1B",
}


@pytest.mark.parametrize("name", TEMPLATES)
def test_forced_call_arguments_validate_against_the_schema(template_models: dict[str, Path], name: str) -> None:
    import jsonschema

    tool: dict[str, Any] = json.loads(json.dumps(KINDS_TOOL))
    if name in FREE_STRING_FORMATS:
        # Their string values stay free text (a random model writes it without end): the
        # other kinds are checked there.
        parameters = tool["function"]["parameters"]
        parameters["properties"] = {k: v for k, v in parameters["properties"].items() if v["type"] != "string"}
        parameters["required"] = list(parameters["properties"])
    fmt = _format(template_models, name)
    turn = fmt.turn(QUESTION, tools=[tool], tool_choice="get_weather", enable_thinking=False)
    # No reasoning (a template may open it anyway), and room for the whitespace the formats
    # leave free between arguments, which a random-weight model fills.
    _, reason, reply = _generate(fmt, turn, max_tokens=1200, reasoning_budget=0)
    calls = reply.tool_calls  # type: ignore[attr-defined]
    assert calls and calls[0].name == "get_weather", (reason, calls)
    jsonschema.validate(calls[0].arguments, tool["function"]["parameters"])
