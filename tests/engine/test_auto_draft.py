"""n_draft="auto" in the engine: lossless against plain decoding on every kind of model,
stats that say what it did, bad input (the controller on its own: tests/unit/test_draft_controller.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mtp_llm import (
    MTP,
    GenerationOptions,
    InvalidOptionError,
    MissingMTPHeadError,
    Model,
    SessionOptions,
    StatsEvent,
    TokenEvent,
)

from tests.helpers import THREADS, make_session


# ---------------------------------------------------------------- engine --


def token_ids(session: MTP, prompt: str, **opts: object) -> list[int]:
    return [e.id for e in session.stream_events(prompt, **opts) if isinstance(e, TokenEvent)]


PROMPTS = ["Hello", "Once upon a time, in a land far away", "a b a b a b a b"]

CASES: dict[str, dict[str, Any]] = {
    "dense": {"target": "random"},
    "dense 33%": {"target": "accept33"},
    "dense 100%": {"target": "accept100"},
    "dense, llama.cpp's driver": {"target": "random", "fuse_catch_up": False},
    "sidecar": {"target": "random-trunk", "draft": "mtp-random-trunk"},
    "hybrid rs": {"target": "hybrid", "rollback": "rs"},
    "hybrid checkpoint": {"target": "hybrid", "rollback": "checkpoint"},
    "dense p_min": {"target": "random", "p_min": 0.3},
    "hybrid checkpoint p_min": {"target": "hybrid", "rollback": "checkpoint", "p_min": 0.3},
}


@pytest.mark.parametrize("case", list(CASES))
def test_greedy_auto_equals_plain_decoding(tiny_paths: dict[str, Path], case: str) -> None:
    spec = dict(CASES[case])
    target = Model.load(tiny_paths[spec.pop("target")])
    draft = Model.load(tiny_paths[spec.pop("draft")]) if "draft" in spec else None
    plain = make_session(target, n_draft=0, n_ctx=1024)
    auto = MTP(target, draft_model=draft, n_draft="auto", n_threads=THREADS, n_ctx=1024, **spec)
    for prompt in PROMPTS:
        # Long enough to cover exploration, plain stretches, probes and their catch-up.
        assert token_ids(auto, prompt, max_tokens=300, temp=0) == token_ids(plain, prompt, max_tokens=300, temp=0)
    s = auto.stats()
    assert s.tokens_emitted == 300 * len(PROMPTS)
    assert sum(s.draft_length_counts) == s.iters - s.replays
    assert s.draft_length_counts[0] > 0 and s.drafts_generated > 0  # plain and drafting passes both ran
    assert 0.0 < s.undrafted_share < 1.0
    assert s.tokens_undrafted == round(s.undrafted_share * s.tokens_emitted)


def test_auto_stats_and_estimates_persist_across_calls(accept100_model: Model) -> None:
    # Flash attention off: on this 64-wide model ggml's per-row flash-attention kernel makes a
    # verify batch cost more than its accepted tokens, and auto rightly decodes plain
    # (1 thread: plain 8.2k tokens/s, n_draft 4 7.3k; off: plain 15.3k, n_draft 1 19.1k).
    session = make_session(accept100_model, n_draft="auto", n_ctx=1024, flash_attn=False)
    assert session.n_draft == "auto" and session.n_draft_max == 4
    session.generate("x", max_tokens=200, temp=0)
    first = session.draft_controller
    assert first is not None and first.iteration_us[0] > 0  # plain decoding measured
    assert first.acceptance[0] > 0.5  # drafts were tried, and all accepted
    call = session.last_stats
    assert call.n_draft == 4 and call.draft_controller == first
    assert call.draft_length_counts[0] >= 3  # plain decoding is measured first
    # The second call starts from what the first learnt: plain decoding's time is known at its
    # first token (the first call had to measure it over its first iterations).
    progress = [e.stats for e in session.stream_events("x", max_tokens=50, temp=0, emit_stats_every=1)
                if type(e) is StatsEvent]
    assert progress[0].draft_controller is not None and progress[0].draft_controller.iteration_us[0] > 0
    second = session.last_stats
    # It drafted, from the acceptance it had learnt. How many plain iterations it ran depends
    # on the times measured (a busy machine makes drafting look dearer): the policy's use of
    # what persists is tested on exact costs in tests/unit/test_draft_controller.py.
    assert sum(second.draft_length_counts[1:]) > 0
    assert second.draft_controller is not None and second.draft_controller.acceptance[0] > 0.5
    payload = second.to_dict()
    assert set(payload["draft_controller"]) == {
        "acceptance", "streams", "threads", "iteration_us", "expected_tokens_per_s", "choice", "probe_interval"
    }
    assert len(payload["draft_length_counts"]) == 5


def test_auto_tells_the_controller_what_the_calls_have_left(
    accept100_model: Model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The controller's ending rule reads what the session knows each round: the tokens the calls on
    auto may still produce and the rows the head queued since it last drafted. Its trace (the file
    MTP_LLM_CONTROLLER_TRACE names when the session is made) writes both on every choice."""
    import gc

    trace = tmp_path / "controller.txt"
    monkeypatch.setenv("MTP_LLM_CONTROLLER_TRACE", str(trace))
    session = make_session(accept100_model, n_draft="auto", n_ctx=512, flash_attn=False)
    monkeypatch.delenv("MTP_LLM_CONTROLLER_TRACE")
    session.generate("x", max_tokens=40, temp=0)
    del session
    gc.collect()  # the controller closes its trace
    lines = [line.split() for line in trace.read_text().splitlines()]
    rounds = []  # (remaining, queued, tokens the round produced, draft length chosen)
    for i, f in enumerate(lines):
        if f[0] == "choose":
            accept = next(g for g in lines[i + 1 :] if g[0] == "accept")
            rounds.append((int(f[6]), int(f[7]), int(accept[2]) + 1, int(f[4])))
    assert rounds[0][0] == 40  # nothing produced before the first round
    for (left, _, made, _), (after, _, _, _) in zip(rounds, rounds[1:]):
        assert after == left - made  # every round's tokens counted down
    assert [queued for _, queued, _, _ in rounds[:4]] == [0, 1, 2, 3]  # plain decoding measured first: a row a round
    assert any(n > 0 for *_, n in rounds)
    # the rows waiting for the head: one more after each plain round (the controller may find plain decoding the
    # faster on this tiny model, by its own timing), at most the round's rows after a drafting one
    for (_, queued, _, n), (_, queued_next, _, _) in zip(rounds, rounds[1:]):
        assert queued_next == queued + 1 if n == 0 else queued_next <= n + 1


def test_per_call_draft_length_overrides_the_session(accept100_model: Model) -> None:
    session = make_session(accept100_model, n_draft="auto", n_ctx=512)
    session.generate("x", max_tokens=40, temp=0, n_draft=2)
    counts = session.last_stats.draft_length_counts  # lengths 0..2: the call's longest is 2
    assert len(counts) == 3 and counts[2] > 0 and session.last_stats.n_draft == 2
    fixed = make_session(accept100_model, n_draft=2, n_ctx=512)
    fixed.generate("x", max_tokens=40, temp=0, n_draft="auto")  # auto, bounded by the session's 2
    assert len(fixed.last_stats.draft_length_counts) == 3


def test_model_without_a_head_says_how_to_decode_plainly(tiny_paths: dict[str, Path]) -> None:
    with pytest.raises(MissingMTPHeadError, match=r"has no MTP draft graph in this llama.cpp build; use n_draft=0"):
        MTP(Model.load(tiny_paths["glm4-nextn"]), n_threads=THREADS)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"n_draft": "fast"}, ["'auto'", "0 (plain decoding)"]),
        ({"n_draft": -1}, ["'auto'"]),
        ({"n_draft": 2.5}, ["'auto'"]),
        ({"n_draft_max": -2}, ["n_draft_max", "between 1 and 16"]),
        ({"n_draft_max": 0}, ["n_draft_max"]),
        ({"p_min": -0.1}, ["p_min", "[0, 1]"]),
        ({"p_min": 1.5}, ["p_min", "[0, 1]"]),
        ({"p_min": "high"}, ["p_min"]),
    ],
)
def test_bad_draft_options_name_the_valid_values(random_model: Model, kwargs: dict[str, Any], words: list[str]) -> None:
    for make in (lambda: SessionOptions(**kwargs), lambda: MTP(random_model, **kwargs)):
        with pytest.raises(InvalidOptionError) as info:
            make()
        for word in words:
            assert word in str(info.value)


def test_bad_per_call_draft_length(random_model: Model) -> None:
    with pytest.raises(InvalidOptionError, match="'auto'"):
        GenerationOptions(n_draft="fast")
    session = make_session(random_model, n_draft=2)
    with pytest.raises(InvalidOptionError, match="longest draft"):
        session.generate("x", max_tokens=4, n_draft=3)
    assert session.generate("x", max_tokens=4, temp=0, n_draft="auto")  # the session is still usable


def test_integrations_default_to_auto_and_publish_what_it_did(tiny_paths: dict[str, Path]) -> None:
    from mtp_llm import STATS_KEY
    from mtp_llm.langchain import ChatMTP
    from mtp_llm.llamaindex import MTPLLM

    path = str(tiny_paths["accept100"])
    chat = ChatMTP(model_path=path, n_threads=THREADS, n_ctx=512, temperature=0, max_tokens=30)
    assert chat.n_draft == "auto"
    stats = chat.invoke("x").response_metadata[STATS_KEY]
    assert sum(stats["draft_length_counts"]) == stats["iters"]
    assert stats["draft_controller"]["iteration_us"][0] > 0
    assert stats["tokens_undrafted"] + stats["drafts_accepted"] + sum(stats["draft_length_counts"][1:]) == 30

    llm = MTPLLM(model_path=path, n_threads=THREADS, n_ctx=512, temperature=0, max_tokens=30, n_draft_max=2)
    li_stats = llm.complete("x").additional_kwargs[STATS_KEY]
    assert len(li_stats["draft_length_counts"]) == 3 and li_stats["n_draft"] == 2


@pytest.mark.parametrize("fuse", [True, False])
def test_p_min_cuts_drafts_losslessly(random_model: Model, fuse: bool) -> None:
    """p_min stops a draft at a token whose probability among the head's top 10 is below
    it (llama.cpp's draft sampler decides, in both drivers): fewer drafts as it rises, none
    at 1, and the output stays plain decoding's."""
    plain_ids = token_ids(make_session(random_model, n_draft=0, n_ctx=1024), PROMPTS[1], max_tokens=120, temp=0)
    drafted = []
    for p_min in (0.0, 0.5, 0.9, 1.0):
        session = make_session(random_model, n_draft=3, p_min=p_min, fuse_catch_up=fuse, n_ctx=1024)
        assert session.mtp_driver == ("fused" if fuse else "upstream")
        assert token_ids(session, PROMPTS[1], max_tokens=120, temp=0) == plain_ids
        drafted.append(session.stats().drafts_generated)
    assert drafted[0] > drafted[1] > drafted[2] > drafted[3] == 0, drafted
