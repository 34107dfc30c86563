"""Prompt cache (cache_prompt): a call reuses the longest prefix its session's contexts
already hold, in the target and in the MTP head, and its output is what a fresh session
gives for the same prompt, token for token, whatever the previous call did."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mtp_llm import MTP, GenerationTimeoutError, InvalidOptionError, Model, TokenEvent

from tests.helpers import SESSION_CASES, THREADS

HISTORY = "The quick brown fox jumps over the lazy dog. " * 6


def token_ids(session: MTP, prompt: str, **opts: Any) -> list[int]:
    return [e.id for e in session.stream_events(prompt, **opts) if isinstance(e, TokenEvent)]


def sessions(tiny_paths: dict[str, Path], case: str, **options: Any) -> tuple[MTP, MTP]:
    """A caching session and a fresh (never caching) one with the same settings."""
    spec = dict(CASES[case], **options)
    target = Model.load(tiny_paths[spec.pop("target")])
    draft = Model.load(tiny_paths[spec.pop("draft")]) if "draft" in spec else None
    common = dict(draft_model=draft, n_threads=THREADS, n_ctx=1024, **spec)
    return MTP(target, **common), MTP(target, cache_prompt=False, **common)


CASES = SESSION_CASES


@pytest.mark.parametrize("case", list(CASES))
def test_cached_calls_equal_fresh_calls(tiny_paths: dict[str, Path], case: str) -> None:
    cached, fresh = sessions(tiny_paths, case)
    first = cached.generate(HISTORY, max_tokens=24, temp=0)
    turns = [
        HISTORY + first + " And then?",  # a chat turn: the history, the answer, something new
        HISTORY + " Something else entirely.",  # shares only the history
        HISTORY + " Something else entirely.",  # the same prompt again
        "A different conversation.",  # nothing in common
        HISTORY + first + " And then?",  # back to the first one
    ]
    reused = []
    for i, prompt in enumerate(turns):
        got = token_ids(cached, prompt, max_tokens=24, temp=0)
        assert got == token_ids(fresh, prompt, max_tokens=24, temp=0), (case, prompt)
        stats = cached.last_stats
        if case in ("dense", "sidecar"):
            # f32 test models: the head's cache kept from a call drafts what a fresh one does.
            f = fresh.last_stats
            assert (stats.drafts_generated, stats.drafts_accepted) == (f.drafts_generated, f.drafts_accepted)
        assert stats.prompt_tokens_processed == stats.prompt_tokens - stats.prompt_tokens_cached
        # The rate counts what the prompt phase decoded: all but the last token (decoded by the first step).
        decoded = stats.prompt_tokens_processed - 1
        assert stats.prompt_tokens_per_sec == (pytest.approx(decoded * 1e6 / stats.prompt_us) if decoded else 0.0)
        reused.append(stats.prompt_tokens_cached)
        if case == "dense plain" and i == 2:  # the same prompt again: cached up to its last token
            assert stats.prompt_tokens_processed == 1 and stats.prompt_tokens_per_sec == 0.0
    # (Hybrid targets, whose recurrent state cannot roll back, reuse the checkpoints
    # saved where earlier prompts ended: the history's.)
    assert reused[0] > 60 and reused[1] > 60 and reused[2] > 60 and reused[3] == 0 and reused[4] > 60
    assert fresh.stats().prompt_tokens_cached == 0


@pytest.mark.parametrize("case", ["dense", "hybrid rs", "sidecar"])
def test_cache_stays_correct_after_cancel_timeout_stop_and_errors(tiny_paths: dict[str, Path], case: str) -> None:
    cached, fresh = sessions(tiny_paths, case)
    prompt = HISTORY + " What next?"
    expected = token_ids(fresh, prompt, max_tokens=40, temp=0)

    # Abandoned mid-generation (a closed stream).
    events = cached.stream_events(HISTORY + " Abandon", max_tokens=40, temp=0)
    for i, _ in enumerate(events):
        if i == 5:
            break
    events.close()  # type: ignore[attr-defined]
    assert token_ids(cached, prompt, max_tokens=40, temp=0) == expected

    # A timeout inside a step.
    with pytest.raises(GenerationTimeoutError):
        cached.generate(HISTORY * 3, max_tokens=200, temp=0, timeout=1e-6)
    assert token_ids(cached, prompt, max_tokens=40, temp=0) == expected

    # A stop string ends the call between committed tokens.
    full = cached.generate(HISTORY + " Stop", max_tokens=30, temp=0)
    if len(full) > 12:
        cached.generate(HISTORY + " Stop", max_tokens=30, temp=0, stop=[full[8:12]])
    assert token_ids(cached, prompt, max_tokens=40, temp=0) == expected

    # Rejected input changes nothing.
    with pytest.raises(InvalidOptionError):
        cached.generate(prompt, max_tokens=40, temp=-1)
    assert token_ids(cached, prompt, max_tokens=40, temp=0) == expected
    assert cached.last_stats.prompt_tokens_cached > 0


def test_cache_prompt_off_per_session_and_per_call(random_model: Model) -> None:
    session = MTP(random_model, n_threads=THREADS, n_ctx=1024, n_draft=2)
    session.generate(HISTORY, max_tokens=4, temp=0)
    session.generate(HISTORY, max_tokens=4, temp=0, cache_prompt=False)
    assert session.last_stats.prompt_tokens_cached == 0
    session.generate(HISTORY, max_tokens=4, temp=0)
    # All but the last prompt token (the first step decodes it); no reused row is decoded again.
    assert session.last_stats.prompt_tokens_cached == session.last_stats.prompt_tokens - 1
    off = MTP(random_model, n_threads=THREADS, n_ctx=1024, n_draft=2, cache_prompt=False)
    off.generate(HISTORY, max_tokens=4, temp=0)
    off.generate(HISTORY, max_tokens=4, temp=0)
    assert off.last_stats.prompt_tokens_cached == 0


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_cache_prompt_must_be_a_bool(random_model: Model, value: Any) -> None:
    with pytest.raises(InvalidOptionError, match="cache_prompt"):
        MTP(random_model, cache_prompt=value)
    if value is not None:
        session = MTP(random_model, n_threads=THREADS, n_ctx=256)
        with pytest.raises(InvalidOptionError, match="cache_prompt"):
            session.generate("x", max_tokens=2, cache_prompt=value)


def test_chat_turns_process_only_what_is_new(tiny_paths: dict[str, Path]) -> None:
    """A 10-turn ChatMTP conversation on a model with a chat template: the prompt tokens
    processed stay within 1.2x of the tokens that are new across turns, and LangChain's
    usage metadata reports the cache reads."""
    from langchain_core.messages import AIMessage, HumanMessage

    from mtp_llm.langchain import ChatMTP

    chat = ChatMTP(model_path=str(tiny_paths["random"]), n_threads=THREADS, n_ctx=4096, temperature=0, max_tokens=12)
    messages: list[Any] = []
    processed = new = 0
    previous_prompt = 0
    for turn in range(10):
        messages.append(HumanMessage(f"Turn {turn}: tell me about the fox and the dog."))
        reply = chat.invoke(messages)
        usage = reply.usage_metadata
        assert usage is not None
        cached = usage["input_token_details"]["cache_read"]  # type: ignore[typeddict-item]
        if turn:
            assert cached > 0
        processed += usage["input_tokens"] - cached
        new += usage["input_tokens"] - previous_prompt
        previous_prompt = usage["input_tokens"]
        messages.append(AIMessage(reply.content))
    assert processed <= 1.2 * new, (processed, new)


@pytest.mark.parametrize("case", ["dense", "sidecar", "hybrid rs", "hybrid checkpoint"])
def test_alternating_conversations_find_their_saved_state(tiny_paths: dict[str, Path], case: str) -> None:
    """Two conversations (an agent's threads) alternating on one session: each call finds its
    own conversation saved, and its output is a fresh session's."""
    cached, fresh = sessions(tiny_paths, case)
    threads = {"a": "Thread A: the fox. " * 12, "b": "Thread B: the dog, a different story. " * 10}
    for turn in range(3):
        for name in ("a", "b"):
            answer = cached.generate(threads[name], max_tokens=8, temp=0)
            assert answer == fresh.generate(threads[name], max_tokens=8, temp=0), (case, turn, name)
            if turn:
                assert cached.last_stats.prompt_tokens_cached > 50, (case, turn, name)
            threads[name] += answer + f" Turn {turn}."
    assert 0 < cached.prompt_cache_bytes <= 256 * 2**20


def test_saved_states_stay_within_their_bound(random_model: Model) -> None:
    session = MTP(random_model, n_threads=THREADS, n_ctx=1024, n_draft=2, cache_size_mb=0.2)
    prompts = [f"{name} says: " + "words and more words " * 8 for name in ("Alpha", "Bravo", "Charlie", "Delta", "Echo", "Foxtrot")]
    sizes = []
    for prompt in prompts:
        session.generate(prompt, max_tokens=4, temp=0)
        sizes.append(session.prompt_cache_bytes)
    assert max(sizes) <= 0.2 * 2**20 and max(sizes) > 0
    # The bound holds a few conversations: the oldest were evicted, the latest saved one is found.
    session.generate(prompts[0], max_tokens=4, temp=0)
    assert session.last_stats.prompt_tokens_cached == 0
    session.generate(prompts[4] + " again", max_tokens=4, temp=0)
    assert session.last_stats.prompt_tokens_cached > 20
    none = MTP(random_model, n_threads=THREADS, n_ctx=1024, n_draft=2, cache_size_mb=0)
    for prompt in prompts[:2]:
        none.generate(prompt, max_tokens=4, temp=0)
    assert none.prompt_cache_bytes == 0


@pytest.mark.parametrize("value", [-1, "big", float("inf"), True])
def test_cache_size_must_be_megabytes(random_model: Model, value: Any) -> None:
    with pytest.raises(InvalidOptionError, match="cache_size_mb"):
        MTP(random_model, cache_size_mb=value)
