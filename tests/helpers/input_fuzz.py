"""Structure-aware generators of hostile text inputs for ``tools/fuzz.py``: chat templates (the
Jinja constructs the pinned llama.cpp tree's templates use, nested and mutated, and mutants of those
templates), GBNF grammars, JSON schemas and tool lists, chat histories and model output.

Each generator takes a seeded ``random.Random`` and returns one JSON-serializable case; the same
seed gives the same cases. Sizes are drawn mostly small, sometimes past the engine's bounds
(nesting over 128-200, thousands of values), so both sides of every bound are exercised.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

# ---------------------------------------------------------------- templates --

_VARS = ["messages", "message", "m", "tools", "tool", "loop", "ns", "x", "add_generation_prompt", "bos_token",
         "messages[0]", "message['content']", "message.role", "tool_call.function.arguments", "loop.index0",
         "undefined_name", "none", "true", "False", "reasoning_content", "enable_thinking"]
_FILTERS = ["tojson", "trim", "length", "upper", "lower", "items", "string", "first", "last", "default('x')",
            "join(', ')", "replace('a', 'b')", "indent(2)", "list", "reverse", "selectattr('role', 'equalto', 'user')",
            "map(attribute='role')", "tojson(indent=2)", "capitalize", "title", "safe", "int", "float", "abs",
            "unique", "sort", "dictsort", "count", "wordcount", "center(10)", "batch(2)", "round", "sum"]
_TESTS = ["defined", "undefined", "string", "mapping", "iterable", "none", "number", "sequence", "true", "false",
          "equalto 1", "in ['a']", "boolean"]
_LITERALS = ["1", "0", "-1", "2.5", "'a'", '"<|im_start|>"', "''", "[]", "{}", "[1, 2]", "{'a': 1}", "none",
             "true", "'x' * 3", "range(3)", "namespace(a=1)", "'abc'[::-1]", "'abc'[1:]", "10 ** 3"]
_BINARY = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", ">=", "and", "or", "in", "not in", "**"]


def _expr(rng: random.Random, depth: int) -> str:
    if depth <= 0 or rng.random() < 0.3:
        return rng.choice(_VARS + _LITERALS)
    kind = rng.randrange(9)
    sub = lambda: _expr(rng, depth - 1)  # noqa: E731
    if kind == 0:
        return f"{sub()} {rng.choice(_BINARY)} {sub()}"
    if kind == 1:
        return f"({sub()})"
    if kind == 2:
        return f"{sub()} | {rng.choice(_FILTERS)}"
    if kind == 3:
        return f"{sub()} is {'not ' * rng.randrange(2)}{rng.choice(_TESTS)}"
    if kind == 4:
        return f"{sub()} if {sub()} else {sub()}"
    if kind == 5:
        return f"not {sub()}"
    if kind == 6:
        return f"[{', '.join(sub() for _ in range(rng.randrange(4)))}]"
    if kind == 7:
        return f"{sub()}[{sub()}]"
    return f"{rng.choice(['raise_exception', 'strftime_now', 'range', 'dict', 'f', 'caller'])}({sub()})"


def _block(rng: random.Random, depth: int) -> str:
    if depth <= 0 or rng.random() < 0.25:
        return rng.choice([f"{{{{ {_expr(rng, 3)} }}}}", "<|im_start|>user\n", "text", "{# comment #}",
                           f"{{%- set x = {_expr(rng, 2)} -%}}", "{% break %}", "{% continue %}", "\n"])
    body = lambda: "".join(_block(rng, depth - 1) for _ in range(rng.randrange(1, 3)))  # noqa: E731
    kind = rng.randrange(8)
    if kind == 0:
        return f"{{% if {_expr(rng, 2)} %}}{body()}{{% elif {_expr(rng, 2)} %}}{body()}{{% else %}}{body()}{{% endif %}}"
    if kind == 1:
        return f"{{% for m in {_expr(rng, 2)} %}}{body()}{{% endfor %}}"
    if kind == 2:
        return f"{{% macro f(a, b=1) %}}{body()}{{% endmacro %}}{{{{ f({_expr(rng, 1)}) }}}}"
    if kind == 3:
        return f"{{% set ns = namespace(v={_expr(rng, 1)}) %}}{body()}{{% set ns.v = {_expr(rng, 1)} %}}"
    if kind == 4:
        return f"{{% filter upper %}}{body()}{{% endfilter %}}"
    if kind == 5:
        return f"{{% set blk %}}{body()}{{% endset %}}{{{{ blk }}}}"
    if kind == 6:
        return f"{{% call f() %}}{body()}{{% endcall %}}"
    return f"{{% for m in messages if m.role != 'system' %}}{body()}{{% else %}}{body()}{{% endfor %}}"


_HOSTILE_TEMPLATES = [
    lambda n: "{% if true %}" * n + "x" + "{% endif %}" * n,
    lambda n: "{{ " + "(" * n + "1" + ")" * n + " }}",
    lambda n: "{{ " + "not " * n + "x }}",
    lambda n: "{{ " + "1 + " * n + "1 }}",
    lambda n: "{{ x" + ".a" * n + " }}",
    lambda n: "{{ x" + "|trim" * n + " }}",
    lambda n: "{{ " + "[" * n + "]" * n + " }}",
    lambda n: "{% if a %}" + "{% elif a %}" * n + "{% endif %}",
    lambda n: "{{ " + "a if b else " * n + "c }}",
    lambda n: "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    lambda n: "{{ 'x' * " + str(10 ** (n % 10)) + " }}",
    lambda n: "{% for i in range(" + str(n * 1000) + ") %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
    lambda n: "{% set ns = namespace(s='x') %}{% for i in range(" + str(n % 40) + ") %}{% set ns.s = ns.s ~ ns.s %}"
              "{% endfor %}{{ ns.s | length }}",
    lambda n: "{{ range(" + str(10 ** (n % 12)) + ") | length }}",
]


def template_sources(tree: Path) -> list[str]:
    return [p.read_text() for p in sorted((tree / "models" / "templates").glob("*.jinja"))]


def _mutate_text(rng: random.Random, text: str, pieces: list[str]) -> str:
    for _ in range(rng.randrange(1, 4)):
        if not text:
            text = rng.choice(pieces)
        a = rng.randrange(len(text) + 1)
        b = min(len(text), a + rng.randrange(1, 64))
        op = rng.randrange(5)
        if op == 0:
            text = text[:a] + text[b:]  # delete a span
        elif op == 1:
            text = text[:a] + text[a:b] * rng.randrange(2, 50) + text[b:]  # repeat a span
        elif op == 2:
            text = text[:a] + rng.choice(pieces) + text[a:]  # insert a construct
        elif op == 3:
            text = text[:a]  # truncate
        else:
            text = text[:a] + chr(rng.choice([0, 0x7B, 0x7D, 0x25, 0x22, 0x27, 0xD7FF, 0x1F600])) + text[a:]
    return text


def template_case(rng: random.Random, real: list[str]) -> dict[str, Any]:
    roll = rng.random()
    if roll < 0.4 and real:
        pieces = ["{%", "%}", "{{", "}}", "{% endif %}", "{% if x %}", "{% for m in messages %}", "{% endfor %}",
                  "(", ")", "[", "]", "|tojson", " not ", " ~ ", "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"]
        source = _mutate_text(rng, rng.choice(real), pieces)
    elif roll < 0.55:
        source = rng.choice(_HOSTILE_TEMPLATES)(rng.choice([3, 50, 150, 199, 201, 300, 1000, 20000]))
    else:
        source = "".join(_block(rng, rng.randrange(1, 6)) for _ in range(rng.randrange(1, 4)))
    return {"template": source, "messages": history_case(rng)["messages"] if rng.random() < 0.3 else None}


# ----------------------------------------------------------------- grammars --

_CLASSES = ["[a-z]", "[^\"\\\\]", "[0-9]", "[z-a]", "[\\x00-\\x7F]", "[^]", "[\\u00e9-\\U0001F600]", "[-]", "[\\]]"]
_LITS = ['"a"', '"hello"', '""', '"\\n"', '"\\u00e9"', '"\\x41"', '"<|im_end|>"', '"{"', '"\\""']


def _gbnf_expr(rng: random.Random, depth: int, rules: list[str]) -> str:
    if depth <= 0 or rng.random() < 0.3:
        return rng.choice(_LITS + _CLASSES + rules + ["<[1000]>", "<think>", ".", "undefined-rule"])
    kind = rng.randrange(5)
    sub = lambda: _gbnf_expr(rng, depth - 1, rules)  # noqa: E731
    if kind == 0:
        return " ".join(sub() for _ in range(rng.randrange(1, 4)))
    if kind == 1:
        return " | ".join(sub() for _ in range(rng.randrange(2, 4)))
    if kind == 2:
        return f"({sub()})"
    if kind == 3:
        return f"({sub()}){rng.choice(['*', '+', '?', '{2}', '{0,3}', '{1,}', '{100000}', '{0,1000000}', '{,5}'])}"
    return f"{sub()}{rng.choice(['*', '+', '?'])}"


_HOSTILE_GRAMMARS = [
    lambda n: "root ::= " + "(" * n + '"a"' + ")" * n,
    lambda n: "root ::= " + "(" * n,
    lambda n: "\n".join([f"r{i} ::= r{i + 1}" for i in range(n)] + [f'r{n} ::= "a"', "root ::= r0"]),
    lambda n: 'root ::= ("a"{0,' + str(n) + "}){0," + str(n) + "}",
    lambda n: "root ::= " + " | ".join(f'"v{i}"' for i in range(n)),
    lambda n: "root ::= root " * (n % 5 + 1) + '"a"',
    lambda n: 'root ::= "' + "\\" * n + '"',
    lambda n: "root ::= [" + "a-" * n + "]",
]


def grammar_case(rng: random.Random) -> dict[str, Any]:
    roll = rng.random()
    if roll < 0.25:
        text = rng.choice(_HOSTILE_GRAMMARS)(rng.choice([5, 150, 199, 201, 1000, 9999, 10001, 20000, 100000]))
    else:
        names = [f"r{i}" for i in range(rng.randrange(0, 6))]
        lines = [f"root ::= {_gbnf_expr(rng, rng.randrange(1, 6), names)}"]
        lines += [f"{n} ::= {_gbnf_expr(rng, rng.randrange(1, 5), names)}" for n in names]
        text = "\n".join(lines)
        if roll > 0.85:
            text = _mutate_text(rng, text, ["(", ")", "::=", "|", '"', "[", "]", "{", "}", "#", "\\"])
    return {"grammar": text}


# ------------------------------------------------------------------ schemas --

_PATTERNS = ["^[a-z]+$", "(a", "^(a)\\1$", "^a(?=b)$", "^[0-9]{3}-[0-9]{4}$", "^.*$", "a", "^(((a)))$", "^[$",
             "^a{2,1}$", "^\\d+$", "^(a|b)*c$", "^" + "(" * 50 + "a" + ")" * 50 + "$", "^\\p{L}$"]


def schema(rng: random.Random, depth: int) -> Any:
    if depth <= 0 or rng.random() < 0.25:
        return rng.choice([{"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"},
                           {"type": "null"}, {}, True, {"const": "x"}, {"type": "string", "format": "date-time"}])
    kind = rng.randrange(10)
    sub = lambda: schema(rng, depth - 1)  # noqa: E731
    if kind == 0:
        props = {rng.choice(["a", "b", "c", "é", "", "a b", "$ref"]) + str(i): sub() for i in range(rng.randrange(4))}
        out: dict[str, Any] = {"type": "object", "properties": props}
        if props and rng.random() < 0.5:
            out["required"] = rng.sample(list(props), rng.randrange(len(props) + 1))
        if rng.random() < 0.3:
            out["additionalProperties"] = rng.choice([False, True, sub()])
        return out
    if kind == 1:
        return {"type": "array", "items": sub(), **rng.choice([{}, {"minItems": 2, "maxItems": 1},
                                                               {"minItems": 1, "maxItems": 3}])}
    if kind == 2:
        return {rng.choice(["anyOf", "oneOf", "allOf"]): [sub() for _ in range(rng.randrange(1, 4))]}
    if kind == 3:
        n = rng.choice([1, 3, 10, 999, 1001, 20000])
        return {"enum": [rng.choice([f"v{i}", i, None, 1.5]) for i in range(n)]}
    if kind == 4:
        return {"type": "string", "pattern": rng.choice(_PATTERNS)}
    if kind == 5:
        low, high = rng.choice([(0, 10), (5, 1), (1, 1), (-1e308, 1e308)])
        key = rng.choice([("minimum", "maximum"), ("exclusiveMinimum", "exclusiveMaximum"), ("minLength", "maxLength")])
        return {"type": rng.choice(["integer", "number", "string"]), key[0]: low, key[1]: high}
    if kind == 6:
        return {"$ref": rng.choice(["#/$defs/a", "#/$defs/b", "#/definitions/x", "#", "http://x/y", "#/$defs/a/b"]),
                "$defs": {"a": rng.choice([{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/b"}, sub()]),
                          "b": rng.choice([{"$ref": "#/$defs/a"}, sub()])}}
    if kind == 7:
        return {"type": [rng.choice(["string", "integer", "null", "object"]) for _ in range(rng.randrange(1, 3))]}
    if kind == 8:
        return {"type": "string", "minLength": rng.choice([0, 5, 100000]), "maxLength": rng.choice([3, 10, 1000000])}
    return {"not": sub(), "if": sub(), "then": sub()}


def _deep_schema(n: int) -> Any:
    out: Any = {"type": "string"}
    for _ in range(n):
        out = {"type": "array", "items": out}
    return out


def schema_case(rng: random.Random) -> dict[str, Any]:
    if rng.random() < 0.1:
        doc = {"__deep_schema__": rng.choice([10, 60, 63, 64, 100, 500, 3000])}
    else:
        doc = schema(rng, rng.randrange(1, 6))
    if rng.random() < 0.5:
        return {"schema": doc}
    tools: list[Any] = []
    for i in range(rng.randrange(1, 4)):
        name = rng.choice([f"tool_{i}", "get weather", "", "é" * 3, "a" * 300, "f"])
        params = doc if i == 0 else schema(rng, 2)
        tools.append(rng.choice([
            {"type": "function", "function": {"name": name, "description": "d", "parameters": params}},
            {"type": "function", "function": {"name": name, "parameters": params}},
            {"name": name, "parameters": params},
            {"type": "function", "function": {"name": name, "parameters": "not a schema"}},
            {"type": "function"}, 5, "tool",
        ]) if rng.random() < 0.2 else {"type": "function", "function": {"name": name, "parameters": params}})
    return {"tools": tools, "tool_choice": rng.choice(["auto", "required", "none", "tool_0", "missing"])}


# ---------------------------------------------------------------- histories --

_CONTENTS = ["hi", "", "<|im_end|>", "<tool_call>", "{\"name\": \"f\"}", "é" * 10, "\x00", "a" * 5000, "{{ x }}",
             "</think>", "<|channel|>", "[TOOL_CALLS]", "\n\n"]


def _deep_args(rng: random.Random) -> Any:
    n = rng.choice([0, 1, 5, 100, 127, 129, 1000, 3000, 30000])
    if rng.random() < 0.5:
        return '{"a": ' + "[" * n + "]" * n + "}"
    return {"__deep__": n}  # a dict nested n deep, built in the child (json.dumps would recurse)


def build_deep(value: Any) -> Any:
    """A case's ``{"__deep__": n}`` markers as the values they stand for (nested n deep)."""
    if isinstance(value, dict):
        if set(value) == {"__deep__"}:
            out: Any = "leaf"
            for _ in range(value["__deep__"]):
                out = {"k": out}
            return out
        if set(value) == {"__deep_schema__"}:
            return _deep_schema(value["__deep_schema__"])
        return {k: build_deep(v) for k, v in value.items()}
    if isinstance(value, list):
        return [build_deep(v) for v in value]
    return value


def history_case(rng: random.Random) -> dict[str, Any]:
    messages: list[Any] = []
    for i in range(rng.randrange(1, 7)):
        role = rng.choice(["system", "user", "assistant", "tool", "user", "assistant", "developer", ""])
        msg: dict[str, Any] = {"role": role, "content": rng.choice(
            _CONTENTS + [None, [{"type": "text", "text": "hi"}], [{"type": "image_url"}], 5])}
        if role == "assistant" and rng.random() < 0.5:
            msg["tool_calls"] = [{"id": rng.choice(["c1", "", "abcdefghi"]), "type": "function",
                                  "function": {"name": rng.choice(["f", "", "g h"]), "arguments": _deep_args(rng)}}
                                 for _ in range(rng.randrange(1, 3))]
        if role == "tool":
            msg["tool_call_id"] = "c1"
        if rng.random() < 0.1:
            msg["reasoning_content"] = rng.choice(_CONTENTS)
        messages.append(msg)
    n = rng.choice([1, 10, 129, 2000, 5000])
    output = rng.choice([
        '<tool_call>\n{"name": "f", "arguments": {"a": ' + "[" * n + "]" * n + "}}\n</tool_call>",
        "<think>plan</think>answer", "<tool_call>\n{\"name\": \"f\", \"arguments\": {", "plain answer",
        '{"name": "f", "arguments": ' + "{\"a\": " * n + "1" + "}" * n + "}",
        "[TOOL_CALLS]f[ARGS]{\"a\": 1}", "<|channel|>commentary to=functions.f<|message|>{}",
        "(" * n, "\ud7ff" * 3,
    ])
    return {"messages": messages, "output": output, "tools": rng.random() < 0.5}


def dumps(case: dict[str, Any]) -> str:
    """One case as a JSON line (deep values are sent as text, built again in the child)."""
    return json.dumps(case, ensure_ascii=True, default=str)
