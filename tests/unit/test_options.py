"""Options cross into the engine by field name: the Python definitions
(SessionOptions, GenerationOptions) and the native structs have the same fields."""

from __future__ import annotations

import dataclasses

import pytest

from mtp_llm import GenerationOptions, InvalidOptionError, SessionOptions, _core
from mtp_llm.options import ChatGrammar


def _native_fields(cls: type) -> set[str]:
    return {n for n in dir(cls) if not n.startswith("_")}


def test_session_options_match_native_context_options() -> None:
    assert {f.name for f in dataclasses.fields(SessionOptions)} == _native_fields(_core.ContextOptions)


def test_generation_options_match_native_generate_options() -> None:
    python = {f.name for f in dataclasses.fields(GenerationOptions)} - GenerationOptions.PYTHON_ONLY
    # `chat` is the rest of a grammar given as a ChatGrammar (the chat layer's tool-call grammar).
    sampling = _native_fields(_core.SamplingOptions) - {"chat"}
    native = (_native_fields(_core.GenerateOptions) - {"sampling"}) | sampling
    assert python == native
    assert GenerationOptions.SAMPLING == sampling
    chat = ChatGrammar(grammar='root ::= "a"', lazy=True, trigger_words=("<tool_call>",), thinking_end=("</think>",))
    native_chat = GenerationOptions(grammar=chat).to_native().sampling
    assert native_chat.grammar == 'root ::= "a"'
    assert (native_chat.chat.lazy, native_chat.chat.trigger_words, native_chat.chat.thinking_end) == (
        True, ["<tool_call>"], ["</think>"])
    assert {f.name for f in dataclasses.fields(ChatGrammar)} - {"grammar"} == _native_fields(_core.ChatGrammar)


def test_to_native_copies_every_value_by_name() -> None:
    options = GenerationOptions(max_tokens=7, timeout=1.5, stop=("x", "y"), temp=0.25, top_k=3, top_p=0.5,
                                min_p=0.125, seed=42, repeat_penalty=1.5, frequency_penalty=0.25,
                                presence_penalty=0.5, penalty_last_n=9, grammar='root ::= "a"', n_draft=2,
                                reasoning_budget=8)
    native = options.to_native()
    assert (native.max_tokens, native.timeout, native.stop, native.n_draft) == (7, 1.5, ["x", "y"], 2)
    s = native.sampling
    assert (s.temp, s.top_k, s.top_p, s.min_p, s.seed) == (0.25, 3, 0.5, 0.125, 42)
    assert (s.repeat_penalty, s.frequency_penalty, s.presence_penalty, s.penalty_last_n) == (1.5, 0.25, 0.5, 9)
    assert (s.grammar, s.reasoning_budget) == ('root ::= "a"', 8)
    unset = GenerationOptions().to_native()
    assert (unset.timeout, unset.n_draft, unset.sampling.grammar) == (None, None, None)
    assert unset.sampling.reasoning_budget == -1

    session = SessionOptions(n_draft=2, n_ctx=64, n_batch=32, n_threads=1, n_threads_batch=2, flash_attn=False,
                             type_k="q8_0", type_v="f16", offload_kqv=False, rollback="checkpoint").to_native()
    assert (session.n_draft, session.n_ctx, session.n_batch, session.n_threads, session.n_threads_batch) == (
        2, 64, 32, 1, 2)
    assert (session.flash_attn, session.type_k, session.type_v, session.offload_kqv, session.rollback) == (
        False, "q8_0", "f16", False, "checkpoint")


@pytest.mark.parametrize(
    ("cls", "kwargs", "match"),
    [
        (GenerationOptions, {"temp": "hot"}, "temp"),
        (GenerationOptions, {"max_tokens": 0}, "max_tokens"),
        (GenerationOptions, {"top_k": None}, "top_k"),
        (GenerationOptions, {"stop": [""]}, "stop"),
        (GenerationOptions, {"reasoning_budget": -2}, r"reasoning_budget must be -1 \(unlimited\), 0 \(no reasoning\)"),
        (GenerationOptions, {"reasoning_budget": 1.5}, r"reasoning_budget must be -1 \(unlimited\)"),
        (GenerationOptions, {"reasoning_budget": None}, "reasoning_budget must not be None"),
        (SessionOptions, {"n_threads": 0}, "n_threads"),
        (SessionOptions, {"type_v": "q9"}, "type_v"),
        (SessionOptions, {"rollback": "undo"}, "rollback"),
        (SessionOptions, {"flash_attn": 1}, "flash_attn"),
    ],
)
def test_options_validate_on_construction(cls: type, kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidOptionError, match=match):
        cls(**kwargs)


