"""Token log-probabilities (``logprobs``, ``top_logprobs``): the target's distribution at each
committed token, equal with MTP on to plain decoding's."""

from __future__ import annotations

import numpy as np
import pytest

from mtp_llm import InvalidOptionError, Model, TokenEvent
from mtp_llm.parity import forward_with_head
from tests.helpers import make_session

PROMPTS = ["Hello", "The quick brown fox jumps over the lazy dog.", "a"]


def events(session, prompt: str, **opts: object) -> list[TokenEvent]:
    return [e for e in session.stream_events(prompt, **opts) if isinstance(e, TokenEvent)]


@pytest.mark.parametrize("model_name", ["random", "accept33", "accept100", "hybrid", "llama-mtp", "glm4moe"])
def test_logprobs_with_mtp_equal_plain_decoding(tiny_paths, model_name: str) -> None:
    model = Model.load(tiny_paths[model_name])
    plain = make_session(model, n_draft=0)
    spec = make_session(model, n_draft=3)
    for prompt in PROMPTS:
        want = events(plain, prompt, max_tokens=24, temp=0, logprobs=True, top_logprobs=3)
        got = events(spec, prompt, max_tokens=24, temp=0, logprobs=True, top_logprobs=3)
        assert [e.id for e in got] == [e.id for e in want]
        for g, w in zip(got, want):
            assert g.logprob is not None and w.logprob is not None
            assert g.logprob == pytest.approx(w.logprob, abs=1e-4)
            assert [t for t, _ in g.top_logprobs] == [t for t, _ in w.top_logprobs]
            # Alternatives far below the chosen token carry the verify batch's summation order in
            # their logits (a few 1e-4 nats at -10): equal to float tolerance, relative.
            assert np.allclose([p for _, p in g.top_logprobs], [p for _, p in w.top_logprobs], rtol=1e-4, atol=1e-4)
            # Greedy: the token is the most likely one, and the top list is sorted.
            assert g.top_logprobs[0][0] == g.id and g.top_logprobs[0][1] == pytest.approx(g.logprob, abs=1e-6)
            assert [p for _, p in g.top_logprobs] == sorted((p for _, p in g.top_logprobs), reverse=True)
    assert spec.stats().drafts_generated > 0


def test_first_logprob_is_the_log_softmax_of_the_targets_logits(random_model: Model) -> None:
    session = make_session(random_model, n_draft=2)
    prompt = "Hello there"
    logits = forward_with_head(random_model, random_model.tokenize(prompt))["trunk_logits"][-1].astype(np.float64)
    for temp in (0.0, 0.7):
        first = events(session, prompt, max_tokens=1, temp=temp, seed=3, top_logprobs=5)[0]
        scaled = logits / (temp if temp > 0 else 1.0)
        log_softmax = scaled - (scaled.max() + np.log(np.exp(scaled - scaled.max()).sum()))
        # The reference decodes the prompt as one batch, the engine in its own batches: the
        # logits agree to float tolerance (~5e-4 here), the formula exactly.
        assert first.logprob == pytest.approx(log_softmax[first.id], abs=2e-3)
        best = np.argsort(-log_softmax)[:5]
        assert [t for t, _ in first.top_logprobs] == best.tolist()


def test_no_logprobs_unless_asked(random_session) -> None:
    got = events(random_session, "Hello", max_tokens=5, temp=0)
    assert all(e.logprob is None and e.top_logprobs == () for e in got)
    only = events(random_session, "Hello", max_tokens=5, temp=0, logprobs=True)
    assert all(e.logprob is not None and e.logprob <= 0.0 and e.top_logprobs == () for e in only)


def test_top_logprobs_bounds(random_session) -> None:
    with pytest.raises(InvalidOptionError, match="top_logprobs"):
        random_session.generate("Hello", max_tokens=2, top_logprobs=21)


@pytest.mark.parametrize("n_batch", [512, 3])
def test_score_is_the_log_softmax_of_each_next_token(random_model: Model, n_batch: int) -> None:
    session = make_session(random_model, n_draft=2)
    text = "The quick brown fox jumps over the lazy dog."
    score = session.score(text, n_batch=n_batch)
    tokens = list(score.tokens)
    assert tokens == session.tokenize_prompt(text) and len(score.logprobs) == len(tokens) - 1
    logits = forward_with_head(random_model, tokens)["trunk_logits"].astype(np.float64)
    log_softmax = logits - (logits.max(axis=1, keepdims=True) + np.log(np.exp(logits - logits.max(axis=1, keepdims=True)).sum(axis=1, keepdims=True)))
    want = [log_softmax[i, tokens[i + 1]] for i in range(len(tokens) - 1)]
    # Chunks of 3 rows sum each dot product as the one-row path does (patch 0010), the reference
    # pass of all rows as tinyBLAS does: on this model's large logits (|x| up to 36) that moves
    # log-probabilities far in the tail (-43) by up to 6e-3, 1.3e-4 relative.
    assert np.allclose(score.logprobs, want, rtol=2e-4, atol=2e-3)
    assert score.total == pytest.approx(sum(score.logprobs))
    assert score.perplexity == pytest.approx(float(np.exp(-np.mean(score.logprobs))))
    # A generation after scoring is unaffected: scoring has a context of its own.
    assert session.generate("Hello", max_tokens=8, temp=0) == make_session(random_model, n_draft=2).generate(
        "Hello", max_tokens=8, temp=0
    )


def test_score_matches_generation_logprobs(random_model: Model) -> None:
    session = make_session(random_model, n_draft=3)
    got = events(session, "Hello", max_tokens=6, temp=0, logprobs=True)
    score = session.score(session.tokenize_prompt("Hello") + [e.id for e in got])
    # Scoring decodes the text as one batch, generation row by row: float tolerance of the
    # random model's batch numerics (its logits are large), a few 1e-3 nats.
    assert np.allclose(score.logprobs[-6:], [e.logprob for e in got], atol=5e-3)


def test_score_needs_two_tokens(random_session) -> None:
    from mtp_llm import InvalidPromptError

    with pytest.raises(InvalidPromptError, match="at least two tokens"):
        random_session.score([5])
