"""Grammar-aware drafting beyond forced prefixes: the head drafts among the tokens
the grammar allows, text the grammar forces after a head draft extends that draft, forced text is
tokenized the way the target writes it; and MTP stays equal to plain decoding on long prompts and
reused prefixes, where ggml's one-row attention and a re-decoded row used to round differently."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from tests.helpers import make_session

from mtp_llm import MTP, Model, TokenEvent
from mtp_llm.bench.common import EXAMPLE_TOOLS
from mtp_llm.chat import chat_format
from mtp_llm.default_model import default_model_path
from mtp_llm.options import GenerationOptions

QUESTIONS = [
    "What's the weather in Paris for the next 3 days, in celsius?",
    "How many yen is 250 US dollars?",
    "Will it rain in London this week? Use fahrenheit.",
]

# Letters only, never forced: every draft of the head is its own choice among the grammar's.
TWO_LETTERS = 'root ::= [ab]{24} "."'


def events(session: MTP, prompt: str, options: GenerationOptions) -> list[TokenEvent]:
    return [e for e in session.stream_events(prompt, options=options) if isinstance(e, TokenEvent)]


@pytest.fixture(scope="module")
def built_in() -> Model:
    return Model.load(default_model_path())


@pytest.fixture(scope="module")
def tool_turns(built_in: Model) -> list[tuple[str, GenerationOptions]]:
    chat = chat_format(built_in)
    base = GenerationOptions(max_tokens=64, temp=0.0, logprobs=True)
    turns = [chat.turn([{"role": "user", "content": q}], tools=EXAMPLE_TOOLS, tool_choice="required") for q in QUESTIONS]
    return [(t.prompt, t.options(base)) for t in turns]


@pytest.mark.parametrize("config", [{"n_draft": 3}, {"n_draft": "auto", "grammar_drafts": False}, {}])
def test_mtp_equals_plain_on_long_prompts_and_reused_prefixes(built_in: Model, tool_turns, config) -> None:
    """Three tool calls sharing a 300-token system prompt (so attention spans more than 512 KV
    cells, where ggml split a one-row pass's attention by thread; and each call reuses the
    previous one's prefix, whose last row the fused head used to have the target decode again):
    token ids and log-probabilities equal plain decoding's, bit for bit."""
    assert len(built_in.tokenize(tool_turns[0][0])) > 256
    plain = MTP(built_in, draft_model=None, n_draft=0)
    spec = MTP(built_in, **config)
    for prompt, options in tool_turns:
        expected = events(plain, prompt, options)
        got = events(spec, prompt, options)
        assert [e.id for e in got] == [e.id for e in expected]
        assert [e.logprob for e in got] == [e.logprob for e in expected]
        assert spec.last_stats is not None and plain.last_stats is not None
        assert spec.last_stats.prompt_tokens_cached == plain.last_stats.prompt_tokens_cached
    assert spec.stats().drafts_generated > 0
    assert plain.last_stats.prompt_tokens_cached > 256  # the later calls did reuse the prefix


def test_forced_text_is_drafted_as_the_model_spells_it(built_in: Model) -> None:
    """SmolLM2 writes compact JSON's `":"` as `":` + `"` (it learnt JSON with spaces), so the
    tokenizer's own spelling of forced text is rejected there. The session learns the model's
    spelling from those rejections: asked again, every forced draft is accepted (one tool, so
    every forced span starts a draft and no head guess precedes it)."""
    turn = chat_format(built_in).turn([{"role": "user", "content": QUESTIONS[0]}], tools=EXAMPLE_TOOLS[:1],
                                      tool_choice="required")
    prompt, options = turn.prompt, turn.options(GenerationOptions(max_tokens=64, temp=0.0))
    plain = MTP(built_in, draft_model=None, n_draft=0)
    expected = [e.id for e in events(plain, prompt, options)]
    session = MTP(built_in, n_draft=3)
    first = events(session, prompt, options)
    first_stats = session.last_stats
    again = events(session, prompt, options)
    stats = session.last_stats
    assert first_stats is not None and stats is not None
    assert [e.id for e in first] == expected == [e.id for e in again]
    assert first_stats.drafts_forced_accepted < first_stats.drafts_forced  # learnt from these
    assert stats.drafts_forced > 0
    assert stats.drafts_forced_accepted == stats.drafts_forced
    assert stats.iters < first_stats.iters
    assert stats.tokens_emitted / stats.iters > 4.0
    arguments = json.loads(built_in.detokenize([t for t in expected if not built_in.is_eog(t)]))["arguments"]
    assert arguments == {"city": "Paris", "unit": "celsius", "days": 3}


def test_a_repeated_json_answer_has_every_forced_pass_accepted(
    built_in: Model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SmolLM2 spells compact JSON its own way under a schema (`{` `"` where the tokenizer has `{"`, a key
    then `":` `"`). The session remembers what the model wrote after each token inside forced text, so
    the same answer asked again has every pass that starts with forced text accepted whole (forced text
    after a wrong head guess falls with the guess), in fewer passes. Read from the forced-draft trace,
    which is written as the passes happen."""
    from mtp_llm.chat import json_schema_grammar

    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 24}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
                       "occupation": {"type": "string", "maxLength": 24}},
        "required": ["name", "age", "occupation"],
        "additionalProperties": False,
    }
    prompt = built_in.apply_chat_template([("user", "Make up a chef character and give their profile as JSON.")])
    options = GenerationOptions(max_tokens=64, temp=0.0, grammar=json_schema_grammar(schema))
    plain = MTP(built_in, draft_model=None, n_draft=0)
    expected = [e.id for e in events(plain, prompt, options)]
    trace = tmp_path / "forced.txt"
    monkeypatch.setenv("MTP_LLM_FORCED_TRACE", str(trace))
    session = MTP(built_in, n_draft=3)
    first = events(session, prompt, options)
    first_stats = session.last_stats
    first_passes = trace.read_text().splitlines()
    again = events(session, prompt, options)
    stats = session.last_stats
    assert first_stats is not None and stats is not None
    assert [e.id for e in first] == expected == [e.id for e in again]
    def forced_only(lines: list[str]) -> list[tuple[int, int]]:
        """(accepted, drafted) of the passes whose draft is forced text only: `A/D prev || ## drafts => tokens`."""
        counts = [line.split()[0].split("/") for line in lines if "|| ##" in line]
        return [(int(a), int(d)) for a, d in counts]

    before = forced_only(first_passes)
    after = forced_only(trace.read_text().splitlines()[len(first_passes):])
    assert any(a < d for a, d in before), before  # the tokenizer's spelling was rejected somewhere
    assert after and all(a == d for a, d in after), after
    assert stats.drafts_forced_accepted > first_stats.drafts_forced_accepted and stats.iters < first_stats.iters
    json.loads(built_in.detokenize([t for t in expected if not built_in.is_eog(t)]))


def test_head_drafts_only_what_the_grammar_allows(random_model: Model) -> None:
    """Under a grammar of two letters the random head's own best token is almost never one of
    them; drafting among the grammar's tokens turns its drafts from sure rejections into
    guesses between two. Output equals plain decoding either way."""
    options = GenerationOptions(max_tokens=40, temp=0.0, grammar=TWO_LETTERS)
    plain = make_session(random_model, n_draft=0)
    constrained = make_session(random_model, n_draft=1)
    free = make_session(random_model, n_draft=1, grammar_drafts=False)
    for prompt in ["Hello", "a", "The quick brown fox"]:
        expected = [e.id for e in events(plain, prompt, options)]
        assert [e.id for e in events(constrained, prompt, options)] == expected
        assert [e.id for e in events(free, prompt, options)] == expected
    c, f = constrained.stats(), free.stats()
    assert f.drafts_generated == f.iters and f.drafts_accepted == 0  # a draft a pass, never a letter
    head_accepted = c.drafts_accepted - c.drafts_forced_accepted
    assert head_accepted >= 5  # measured: 10 of 62
    assert c.drafts_forced_accepted == 3  # the final ".", forced after the last letter, once per call
    assert c.iters < f.iters


def test_a_head_draft_is_extended_by_the_text_it_forces(random_model: Model) -> None:
    """An enum whose values diverge at their first letter: the head picks the value's first
    token, the rest of the value and the closing text are forced and ride in the same draft."""
    grammar = 'root ::= ("alpha-one" | "bravo-two" | "charlie-three") " ok"'
    options = GenerationOptions(max_tokens=24, temp=0.0, grammar=grammar)
    plain = make_session(random_model, n_draft=0)
    session = make_session(random_model, n_draft=1)
    expected = [e.id for e in events(plain, "Pick one:", options)]
    assert [e.id for e in events(session, "Pick one:", options)] == expected
    stats = session.last_stats
    assert stats is not None
    # The first pass: the head drafts the first letter among a/b/c and the rest is forced after it.
    assert stats.drafts_forced > 0 and stats.drafts_generated > stats.drafts_forced
    assert stats.iters <= 3


def test_grammar_drafts_with_logprobs_equal_plain(built_in: Model, tool_turns) -> None:
    prompt, options = tool_turns[1]
    options = dataclasses.replace(options, top_logprobs=3)
    plain = MTP(built_in, draft_model=None, n_draft=0)
    session = MTP(built_in)
    expected = events(plain, prompt, options)
    got = events(session, prompt, options)
    assert [(e.id, e.logprob, e.top_logprobs) for e in got] == [(e.id, e.logprob, e.top_logprobs) for e in expected]
