"""Grammar-forced drafts (``SessionOptions.grammar_drafts``): text a call's grammar forces is
drafted without a head pass and verified like any draft; output stays the target's."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tests.helpers import make_session

from mtp_llm import MTP, Model, TokenEvent
from mtp_llm.chat import json_schema_grammar
from mtp_llm.gguf.synthetic import synthetic_model

# Every character forced, none of them in a merge of the tiny vocabulary: one token each.
LITERAL = '{"x": 1, "y": 2}'
LITERAL_GRAMMAR = "root ::= " + json.dumps(LITERAL)

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"enum": ["Paris", "London", "Tokyo"]},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "alerts": {"type": "boolean"},
    },
    "required": ["city", "unit", "days", "alerts"],
    "additionalProperties": False,
}

PROMPTS = ["Hello", "Weather report:", "a", "The quick brown fox jumps over the lazy dog."]


def token_ids(session: MTP, prompt: str, **opts: object) -> list[int]:
    return [e.id for e in session.stream_events(prompt, **opts) if isinstance(e, TokenEvent)]


@pytest.mark.parametrize("model_name", ["random", "accept100"])
def test_a_fully_forced_answer_is_drafted_by_the_grammar_with_exact_stats(tiny_paths, model_name: str) -> None:
    """16 forced characters, n_draft 4: the grammar's drafts are not the head's, so a pass takes up
    to 7 of them whatever n_draft (kMaxForcedDrafts): passes draft 7 and 7 forced tokens and the
    target adds one token to each; then the head drafts among what the grammar allows, which is
    only end-of-generation, and it is accepted. The length counts stop at n_draft: the two forced
    passes fall in its last bucket."""
    model = Model.load(tiny_paths[model_name])
    session = make_session(model, n_draft=4)
    text = session.generate("Hello", max_tokens=32, temp=0, grammar=LITERAL_GRAMMAR)
    assert text == LITERAL
    stats = session.last_stats
    assert stats is not None
    assert (stats.iters, stats.drafts_forced, stats.drafts_forced_accepted) == (3, 14, 14)
    assert (stats.drafts_generated, stats.drafts_accepted) == (15, 15)
    assert stats.tokens_emitted == len(LITERAL) + 1  # and the end-of-generation token
    assert stats.mean_accepted_length == pytest.approx(1 + 15 / 3)
    assert stats.head_acceptance_rate == 1.0
    assert stats.draft_length_counts == (0, 1, 0, 0, 2)


def test_grammar_drafts_off_leaves_the_head_drafting(random_model: Model) -> None:
    session = make_session(random_model, n_draft=4, grammar_drafts=False)
    assert session.generate("Hello", max_tokens=32, temp=0, grammar=LITERAL_GRAMMAR) == LITERAL
    stats = session.last_stats
    assert stats is not None and stats.drafts_forced == 0
    assert stats.iters > 4  # the random head's drafts are mostly rejected: about one token a pass


@pytest.mark.parametrize("n_draft", [1, 3, "auto"])
@pytest.mark.parametrize("model_name", ["random", "accept33"])
def test_greedy_output_under_a_json_schema_equals_plain_decoding(tiny_paths, model_name: str, n_draft) -> None:
    model = Model.load(tiny_paths[model_name])
    grammar = json_schema_grammar(SCHEMA)
    plain = make_session(model, n_draft=0)
    spec = make_session(model, n_draft=n_draft)
    for prompt in PROMPTS:
        expected = token_ids(plain, prompt, max_tokens=80, temp=0, grammar=grammar)
        got = token_ids(spec, prompt, max_tokens=80, temp=0, grammar=grammar)
        assert got == expected, (model_name, n_draft, prompt)
        text = model.detokenize([t for t in got if not model.is_eog(t)])
        assert set(json.loads(text)) == set(SCHEMA["properties"])
    stats = spec.stats()
    assert stats.drafts_forced > 0
    assert stats.drafts_forced_accepted <= stats.drafts_forced
    assert plain.stats().drafts_generated == 0


def test_schema_output_takes_few_passes_per_token(random_model: Model) -> None:
    """Keys, punctuation and the rest of each enum value are forced: with the random head
    (nearly always wrong) each verify pass still commits several tokens."""
    session = make_session(random_model, n_draft=4)
    grammar = json_schema_grammar(SCHEMA)
    for prompt in PROMPTS:
        session.generate(prompt, max_tokens=80, temp=0, grammar=grammar)
    stats = session.stats()
    assert stats.mean_accepted_length >= 6.0, stats.summary()  # measured 7.06 (3.0 before forced tails)
    # Forced text after a head draft rides in its draft and falls with it when the head is wrong.
    assert stats.drafts_forced_accepted / stats.drafts_forced >= 0.8, stats.summary()


def test_forced_tails_stop_while_the_heads_drafts_under_the_grammar_fail(
    random_model: Model, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A forced tail rides on a head draft and falls with it, each of its tokens a verify row: after the
    random head's first rejected draft under the grammar (acceptance below 0.3, from a prior of one half)
    no forced tail goes past the head's own length (n_draft), until its drafts are accepted often enough
    again. Read from the session's forced-draft trace (``MTP_LLM_FORCED_TRACE``: a line per pass with forced
    drafts, ``accepted/drafted prev || | head drafts ## forced drafts => target tokens``)."""
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "m": {"type": "integer"}},
              "required": ["n", "m"], "additionalProperties": False}
    trace = tmp_path / "forced.txt"
    monkeypatch.setenv("MTP_LLM_FORCED_TRACE", str(trace))
    session = make_session(random_model, n_draft=2)
    monkeypatch.delenv("MTP_LLM_FORCED_TRACE")
    for prompt in PROMPTS:
        session.generate(prompt, max_tokens=40, temp=0, grammar=json_schema_grammar(schema))
    session.close()
    after_head = [line for line in trace.read_text().splitlines() if line.split("||")[1].startswith(" | ")]
    drafted = [int(line.split()[0].split("/")[1]) for line in after_head]
    assert len(after_head) >= 3, after_head
    assert sum(1 for n in drafted if n > 2) <= 1, after_head  # the first, on the prior


def test_parallel_calls_draft_their_own_forced_text(random_model: Model) -> None:
    import concurrent.futures

    grammar = json_schema_grammar(SCHEMA)
    plain = make_session(random_model, n_draft=0)
    expected = {p: plain.generate(p, max_tokens=80, temp=0, grammar=grammar) for p in PROMPTS}
    session = make_session(random_model, n_draft=3, n_parallel=4, n_ctx=2048)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        got = dict(zip(PROMPTS, pool.map(lambda p: session.generate(p, max_tokens=80, temp=0, grammar=grammar), PROMPTS)))
    assert got == expected
    assert session.stats().drafts_forced > 0


# Chi-square critical value at significance 0.001 for 2 degrees of freedom (3 bins).
CHI2_CRITICAL_DF2 = 13.82


@pytest.mark.parametrize("draft_temp", [None, 1.0], ids=["argmax-drafts (default)", "sampled-drafts"])
def test_sampled_output_under_a_grammar_follows_the_target_distribution(tiny_paths, draft_temp: float | None) -> None:
    """At temp=1 under a grammar, with forced drafts ("xy" after each letter) and head drafts
    both in play, the letters follow the target's distribution restricted to the grammar's
    choices. Argmax drafts ("a", the default under a grammar) are verified by sampling the target and
    comparing: each seed gives plain decoding's tokens. Sampled drafts (draft_temp set) are verified by
    rejection against the distribution plain decoding samples under the grammar: the same
    distribution, other draws."""
    from mtp_llm.gguf.tiny_models import SAMPLING_TOKENS
    from mtp_llm.parity import forward_with_head

    model = Model.load(tiny_paths["sampling"])
    prompt = "Hi there"
    logits = forward_with_head(model, model.tokenize(prompt))["trunk_logits"][-1]
    weights = np.exp(logits - logits.max())
    letters = [float(weights[t]) for t in SAMPLING_TOKENS]
    target = [w / sum(letters) for w in letters]

    grammar = 'root ::= ' + ' '.join(['[abc] "xy"'] * 8)  # no end before max_tokens
    sampling = {"temp": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "max_tokens": 24, "grammar": grammar}
    plain, spec = make_session(model, n_draft=0), make_session(model, n_draft=2)
    counts = [0, 0, 0]
    for seed in range(700):
        ids = token_ids(spec, prompt, seed=seed, draft_temp=draft_temp, **sampling)
        if draft_temp is None:
            assert ids == token_ids(plain, prompt, seed=seed, **sampling), seed
        assert [ids[k + 1 : k + 3] for k in range(0, len(ids), 3)] == [[120, 121]] * 8  # "xy" after each letter
        for token in ids[3::3]:  # letters after the first
            counts[SAMPLING_TOKENS.index(token)] += 1
    stats = spec.stats()
    head_drafts = stats.drafts_generated - stats.drafts_forced
    head_rejected = head_drafts - (stats.drafts_accepted - stats.drafts_forced_accepted)
    assert stats.drafts_forced > 0 and head_drafts > 0  # the head drafted the letters, the grammar the "xy"
    # A forced "xy" follows the head's letter in the same draft: it is rejected only with that letter.
    assert stats.drafts_forced - stats.drafts_forced_accepted <= 2 * head_rejected
    chi2 = sum((c - sum(counts) * p) ** 2 / (sum(counts) * p) for c, p in zip(counts, target))
    assert chi2 < CHI2_CRITICAL_DF2, (counts, target)
    biased = [target[0] + 0.05, target[1] - 0.03, target[2] - 0.02]
    assert sum((c - sum(counts) * p) ** 2 / (sum(counts) * p) for c, p in zip(counts, biased)) > CHI2_CRITICAL_DF2


@pytest.fixture(scope="module")
def synthetic_4096(tmp_path_factory: pytest.TempPathFactory) -> Model:
    """A forced-acceptance synthetic model with a 4,096-token vocabulary: large enough for patch 0019's
    search among the best candidates (the random model's 264 tokens are scanned whole)."""
    return Model.load(synthetic_model("2M", None, "f16", tmp_path_factory.mktemp("synthetic_4096")))


@pytest.mark.parametrize("n_draft", [0, 3])
@pytest.mark.parametrize("which", ["random", "synthetic 4096"])
def test_greedy_under_a_grammar_picks_what_the_whole_vocabulary_scan_picks(
    random_model: Model, synthetic_4096: Model, which: str, n_draft: int
) -> None:
    """Patch 0019: a greedy chain resamples a token the grammar rejects as the best allowed one among
    its top candidates, not by a grammar pass over the whole vocabulary. temp=1 with top_k=1 is the
    same choice (the highest allowed logit) through llama.cpp's full resampling. Neither model's
    favourite is usually allowed by the schema, so most tokens are resamples."""
    model = random_model if which == "random" else synthetic_4096
    grammar = json_schema_grammar(SCHEMA)
    session = make_session(model, n_draft=n_draft)
    for prompt in PROMPTS:
        fast = token_ids(session, prompt, max_tokens=160, temp=0, grammar=grammar)
        full = token_ids(session, prompt, max_tokens=160, temp=1.0, top_k=1, seed=7, grammar=grammar)
        assert fast == full, prompt
        assert json.loads(model.detokenize(fast))["unit"] in ("celsius", "fahrenheit")
