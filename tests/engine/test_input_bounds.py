"""Hostile chat templates, grammars, schemas, tools, histories and model output: each raises an
MTPError subclass within 10 s, and the same process then serves a plain completion.

Every case runs in a child process (llama.cpp's Jinja engine, GBNF parser and JSON readers
recurse without a bound: without the engine's bounds these end the process with SIGSEGV, hang,
or raise RecursionError). The bounds are listed in docs/reliability.md.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from mtp_llm import Model
from tests.helpers import make_session

PRELUDE = """
import json, sys, mtp_llm
from mtp_llm import MTP, Model
from mtp_llm.chat import ChatFormat, json_schema_grammar
model = Model.load(sys.argv[1])
qwen3 = sys.argv[2]
HI = [{"role": "user", "content": "hi"}]

def deep_list(n):
    return "[" * n + "]" * n

def call(args):
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": args}}]}

def generate(**kw):
    return MTP(model, n_draft=0, n_threads=1, n_ctx=256).generate("Hello", max_tokens=2, temp=0, **kw)
"""

EPILOGUE = """
import time
started = time.monotonic()
try:
    case()
    print("NO ERROR")
except mtp_llm.MTPError as exc:
    print("RAISED", type(exc).__name__, str(exc).replace("\\n", " "))
print("SECONDS", time.monotonic() - started)
print("PLAIN", len(generate()) > 0)
"""

DEEP_IFS = "{% if true %}" * 20000 + "x" + "{% endif %}" * 20000

CASES: dict[str, tuple[str, str, str]] = {
    # name: (code defining case(), the error class, a part of its message)
    "template: recursive macro": (
        "def case(): ChatFormat(model, '{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}').render(HI)",
        "ChatTemplateError", "calls nest deeper than 500",
    ),
    "template: 20,000 nested ifs": (
        f"def case(): ChatFormat(model, {DEEP_IFS!r}).render(HI)", "ChatTemplateError", "nests over 200 deep",
    ),
    "template: 50,000 nested parentheses": (
        "def case(): ChatFormat(model, '{{ ' + '(' * 50000 + '1' + ')' * 50000 + ' }}').render(HI)",
        "ChatTemplateError", "chat_template=",
    ),
    "template: recursive macro through Model.apply_chat_template": (
        "def case(): model.apply_chat_template([('user', 'hi')], "
        "chat_template='{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}')",
        "", "",  # any MTPError: the class is the model layer's
    ),
    "template: a 100 MB string": (
        "def case(): ChatFormat(model, '{{ \"x\" * 100000000 }}').render(HI)", "ChatTemplateError", "repeated string",
    ),
    "template: 10^8 loop steps": (
        "def case(): ChatFormat(model, '{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}"
        "{% endfor %}').render(HI)",
        "ChatTemplateError", "longer than 5 s",
    ),
    "template: a 10^7-item range (found by tools/fuzz.py: a hang)": (
        "def case(): ChatFormat(model, '{{ range(10000000) | length }}').render(HI)", "ChatTemplateError",
        "items exceeds the limit",
    ),
    "template: syntax error names the reason": (
        "def case(): ChatFormat(model, '{% if %}').render(HI)", "ChatTemplateError", "Unexpected token",
    ),
    "grammar: groups nested 20,000 deep": (
        "def case(): generate(grammar='root ::= ' + '(' * 20000 + '\"a\"' + ')' * 20000)",
        "GrammarError", "nests groups over 200 deep",
    ),
    "grammar: 100,000 unclosed groups": (
        "def case(): generate(grammar='root ::= ' + '(' * 100000)", "GrammarError", "nests groups",
    ),
    "grammar: a repetition expanding to 10^9 elements": (
        "def case(): generate(grammar='root ::= (\"a\"{0,100000}){0,10000}')", "GrammarError", "expands to over",
    ),
    "grammar: 30 repetitions stacked on an empty group (found by tools/fuzz.py: a hang)": (
        "def case(): generate(grammar='root ::= ((\"\"))' + '+' * 30)", "GrammarError",
        "entering rule 'root' gives over 20000 parse states",
    ),
    "grammar: the same after a literal, reached only once 'a' is generated": (
        "def case(): generate(grammar='root ::= \"a\" item\\nitem ::= ((\"\"))' + '*+' * 15)", "GrammarError",
        "too ambiguous",
    ),
    "grammar: left recursion, a rule that starts with itself (a hang of the check before llama.cpp's)": (
        "def case(): generate(grammar='root ::= \"\"\\nr4 ::= [^\"]+ r4 | \"b\" | r4 (r4)?')", "GrammarError",
        "left-recursive: from rule 'r4'",
    ),
    "grammar: left recursion through a rule that matches nothing (llama.cpp's check misses it: out of memory)": (
        "def case(): generate(grammar='root ::= s\\ns ::= g s \"x\" | \"y\"\\ng ::= ((\"\"))')", "GrammarError",
        "left-recursive",
    ),
    "history: tool-call arguments nested 30,000 deep (Qwen3)": (
        "def case(): ChatFormat(Model.load(qwen3)).render(HI + [call('{\"a\": ' + deep_list(30000) + '}')])",
        "InvalidPromptError", "nest 30001 deep",
    ),
    "history: arguments as a dict nested 2,000 deep": (
        "def case():\n    a = {}\n    for _ in range(2000): a = {'a': a}\n"
        "    ChatFormat(Model.load(qwen3)).render(HI + [call(a)])",
        "InvalidPromptError", "messages nest over 128",
    ),
    "output: a tool call nested 5,000 deep fed to the parser (Qwen3)": (
        "def case():\n"
        "    tool = {'type': 'function', 'function': {'name': 'f', 'parameters': {'type': 'object'}}}\n"
        "    turn = ChatFormat(Model.load(qwen3)).turn(HI, tools=[tool])\n"
        "    turn.feed('<tool_call>\\n{\"name\": \"f\", \"arguments\": {\"a\": ' + deep_list(5000) + '}}\\n</tool_call>')\n"
        "    turn.finish('eog')",
        "ChatParseError", "nests brackets 5002 deep",
    ),
    "output: a tool call nested 2,000 deep (Python's RecursionError)": (
        "def case():\n"
        "    tool = {'type': 'function', 'function': {'name': 'f', 'parameters': {'type': 'object'}}}\n"
        "    turn = ChatFormat(Model.load(qwen3)).turn(HI, tools=[tool])\n"
        "    turn.feed('<tool_call>\\n{\"name\": \"f\", \"arguments\": {\"a\": ' + deep_list(2000) + '}}\\n</tool_call>')\n"
        "    turn.finish('eog')",
        "ChatParseError", "nests brackets",
    ),
    "schema: nested 2,000 deep": (
        "def case():\n    s = {'type': 'string'}\n    for _ in range(2000): s = {'type': 'array', 'items': s}\n"
        "    json_schema_grammar(s)",
        "ToolSchemaError", "over 128 deep",
    ),
    "tool: parameters nested 3,000 deep (JSON text)": (
        "def case(): mtp_llm._core.ChatTemplates(Model.load(qwen3)._native).apply(json.dumps(HI), "
        "'[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": ' + deep_list(3000) + '}}]')",
        "ToolSchemaError", "nest 3003 deep",
    ),
    "schema: 20,000 enum values": (
        "def case(): generate(grammar=json_schema_grammar({'enum': [f'v{i}' for i in range(20000)]}))",
        "ToolSchemaError", "over 1000 enum values",
    ),
    "schema: an unanchored pattern": (
        "def case(): json_schema_grammar({'type': 'string', 'pattern': '(a'})", "ToolSchemaError", "not anchored",
    ),
    "schema: a back-referencing pattern": (
        "def case(): json_schema_grammar({'type': 'string', 'pattern': '^(a)\\\\1$'})", "ToolSchemaError",
        "back-reference",
    ),
    "schema: minimum above maximum": (
        "def case(): json_schema_grammar({'type': 'integer', 'minimum': 5, 'maximum': 1})", "ToolSchemaError",
        "minimum 5 above maximum 1",
    ),
    "schema: a $ref cycle": (
        "def case(): json_schema_grammar({'$ref': '#/$defs/a', '$defs': {'a': {'$ref': '#/$defs/a'}}})",
        "ToolSchemaError", "$ref cycle",
    ),
}


@pytest.fixture(scope="module")
def paths(tiny_paths: dict[str, Path], template_models: dict[str, Path]) -> tuple[str, str]:
    return str(tiny_paths["random"]), str(template_models["Qwen-Qwen3-0.6B"])


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_input_raises_and_process_serves(name: str, paths: tuple[str, str]) -> None:
    code, error, words = CASES[name]
    proc = subprocess.run(
        [sys.executable, "-", *paths], input=PRELUDE + code + EPILOGUE, capture_output=True, text=True, timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 0, f"rc={proc.returncode}: {proc.stderr[-800:]}"
    lines = proc.stdout.splitlines()
    raised = next((line for line in lines if line.startswith(("RAISED", "NO ERROR"))), "")
    assert raised.startswith(f"RAISED {error}"), proc.stdout[-800:] + proc.stderr[-800:]
    assert words in raised
    assert "PLAIN True" in lines
    seconds = float(next(line for line in lines if line.startswith("SECONDS")).split()[1])
    assert seconds < 10, f"{seconds:.1f} s"



def test_a_grammar_of_3000_chained_rules_is_accepted(tiny_paths: dict[str, Path]) -> None:
    """The ambiguity check enters each rule once: a long chain of rules is no reason to refuse a grammar."""
    grammar = "root ::= r0\n" + "".join(f'r{i} ::= r{i + 1} "x"\n' for i in range(3000)) + 'r3000 ::= "a"\n'
    session = make_session(Model.load(tiny_paths["random"]), n_draft=2)
    started = time.perf_counter()
    text = session.generate("Hi", max_tokens=3, temp=0, grammar=grammar)
    assert text[0] == "a" and set(text[1:]) == {"x"}, text
    assert time.perf_counter() - started < 10
