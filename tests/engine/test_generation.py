"""Real MTP generation on the tiny models: losslessness, exact stats, text assembly."""

from __future__ import annotations

import numpy as np
import pytest

from mtp_llm import MTP, DoneEvent, EogEvent, Model, StatsEvent, TokenEvent
from mtp_llm.gguf.tiny_models import TOKEN_X, TOKEN_Y
from tests.helpers import make_session
from tests.helpers.shakespeare import shakespeare_model_path

PROMPTS = ["Hello", "The quick brown fox jumps over the lazy dog.", "a", "Once upon a time, in a land far away"]


def token_ids(session: MTP, prompt: str, **opts: object) -> list[int]:
    return [e.id for e in session.stream_events(prompt, **opts) if isinstance(e, TokenEvent)]


@pytest.mark.parametrize("n_draft", [1, 2, 3, 4])
@pytest.mark.parametrize("model_name", ["random", "accept33", "accept100"])
def test_greedy_mtp_equals_plain_decoding(tiny_paths, model_name: str, n_draft: int) -> None:
    model = Model.load(tiny_paths[model_name])
    plain = make_session(model, n_draft=0)
    spec = make_session(model, n_draft=n_draft)
    for prompt in PROMPTS:
        expected = token_ids(plain, prompt, max_tokens=40, temp=0)
        got = token_ids(spec, prompt, max_tokens=40, temp=0)
        assert got == expected, (model_name, n_draft, prompt)
        assert len(got) == 40
    assert spec.stats().drafts_generated > 0
    assert plain.stats().drafts_generated == 0


@pytest.mark.parametrize("n_draft", [1, 3])
def test_greedy_mtp_equals_plain_decoding_with_flash_attention(random_model: Model, n_draft: int) -> None:
    plain = make_session(random_model, n_draft=0, flash_attn=True)
    spec = make_session(random_model, n_draft=n_draft, flash_attn=True)
    assert plain.flash_attn == spec.flash_attn == "on"
    for prompt in PROMPTS:
        assert token_ids(spec, prompt, max_tokens=40, temp=0) == token_ids(plain, prompt, max_tokens=40, temp=0)
    assert spec.stats().drafts_generated > 0


def test_flash_attention_default_is_on_on_a_cpu_build(random_model: Model) -> None:
    # The extension is built for the CPU only; there only flash attention computes a query
    # row alike in a one-row pass and in a verify batch (greedy MTP == plain, bit for bit).
    assert make_session(random_model).flash_attn == "on"
    assert make_session(random_model, flash_attn=True).flash_attn == "on"
    assert make_session(random_model, flash_attn=False).flash_attn == "off"
    # A quantized V cache needs flash attention, so "auto" leaves the choice to llama.cpp
    # (on the default model: the tiny models' 16-wide heads cannot hold q8_0 blocks of 32).
    default = Model.load(shakespeare_model_path())
    quantized = make_session(default, n_draft=2, type_k="q8_0", type_v="q8_0")
    assert quantized.flash_attn == "auto"
    plain = make_session(default, n_draft=0, type_k="q8_0", type_v="q8_0")
    prompt = "To be, or not to be"
    assert token_ids(quantized, prompt, max_tokens=16, temp=0) == token_ids(plain, prompt, max_tokens=16, temp=0)


@pytest.mark.parametrize("n_draft", [1, 3])
def test_sidecar_split_model_equals_embedded(tiny_paths, random_model: Model, n_draft: int) -> None:
    trunk = Model.load(tiny_paths["random-trunk"])
    sidecar = Model.load(tiny_paths["mtp-random-trunk"])
    assert not trunk.has_mtp_head and sidecar.is_mtp_sidecar
    split = make_session(trunk, draft_model=sidecar, n_draft=n_draft)
    embedded = make_session(random_model, n_draft=n_draft)
    for prompt in PROMPTS:
        assert token_ids(split, prompt, max_tokens=32, temp=0) == token_ids(embedded, prompt, max_tokens=32, temp=0)
    a, b = split.stats(), embedded.stats()
    assert (a.drafts_generated, a.drafts_accepted) == (b.drafts_generated, b.drafts_accepted)


def test_per_call_plain_decoding_on_an_mtp_session(random_model: Model) -> None:
    session = make_session(random_model, n_draft=3)
    mtp_ids = token_ids(session, "Hello", max_tokens=24, temp=0)
    session.reset_stats()
    plain_ids = token_ids(session, "Hello", max_tokens=24, temp=0, n_draft=0)
    assert plain_ids == mtp_ids
    stats = session.stats()
    assert stats.drafts_generated == 0 and stats.iters == 24


def test_accept100_exact_stats(accept100_model: Model) -> None:
    session = make_session(accept100_model, n_draft=3)
    text = session.generate("Hi", max_tokens=16, temp=0)
    assert text == "a" * 16
    s = session.stats()
    # Four verify passes, each accepting 3 drafts and adding 1 token.
    assert (s.iters, s.drafts_generated, s.drafts_accepted, s.tokens_emitted) == (4, 12, 12, 16)
    assert s.acceptance_rate == 1.0
    assert s.mean_accepted_length == 4.0
    assert s.acceptance_rate_per_position == (1.0, 1.0, 1.0)
    assert s.replays == 0 and s.timing_us.ckpt == 0


def test_accept33_exact_stats(accept33_model: Model) -> None:
    session = make_session(accept33_model, n_draft=3)
    ids = token_ids(session, "Hi", max_tokens=20, temp=0)
    assert ids == [TOKEN_X] * 20
    s = session.stats()
    # Each pass drafts [X, Y, Y]: the first is accepted, the second rejected,
    # so 2 tokens per pass; the last pass may draft only what the budget leaves.
    assert s.iters == 10
    assert s.drafts_accepted == 10
    assert s.drafts_generated == 9 * 3 + 1
    assert s.acceptance_rate_per_position == (1.0, 0.0, 0.0)
    assert s.mean_accepted_length == 2.0


def test_accept33_is_one_third_over_full_passes(accept33_model: Model) -> None:
    session = make_session(accept33_model, n_draft=3)
    events = list(session.stream_events("Hi", max_tokens=30, temp=0, emit_stats_every=2))
    stats_events = [e.stats for e in events if isinstance(e, StatsEvent)]
    assert len(stats_events) == 15
    # After each full pass (2 tokens) exactly one of three drafts was accepted.
    for snapshot in stats_events[:-1]:
        assert snapshot.drafts_generated == 3 * snapshot.drafts_accepted
        assert snapshot.acceptance_rate == pytest.approx(1 / 3)


def test_head_disagreeing_token_is_y(accept33_model: Model) -> None:
    # Sanity of the forced model: the head proposes Y from position 2 on.
    assert accept33_model.detokenize([TOKEN_X, TOKEN_Y]) == "ab"


def test_eog_event_and_done(tiny_paths) -> None:
    session = make_session(Model.load(tiny_paths["eos"]), n_draft=3)
    events = list(session.stream_events("Hi", max_tokens=10, temp=0))
    assert isinstance(events[-1], DoneEvent) and events[-1].finish_reason == "eog"
    assert isinstance(events[-2], EogEvent)
    assert events[0] == TokenEvent(session.model.token_eos, "")
    assert session.generate("Hi", max_tokens=10, temp=0) == ""


def test_done_event_carries_call_stats(accept100_model: Model) -> None:
    session = make_session(accept100_model, n_draft=2)
    session.generate("Hi", max_tokens=9, temp=0)
    events = list(session.stream_events("Hi", max_tokens=9, temp=0))
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.finish_reason == "length"
    assert done.stats.tokens_emitted == 9 and done.stats.generations == 1
    assert session.stats().tokens_emitted == 18 and session.stats().generations == 2
    assert session.last_stats == done.stats or session.last_stats.tokens_emitted == 9


def test_stats_are_cumulative_and_reset(accept100_model: Model) -> None:
    session = make_session(accept100_model, n_draft=3)
    session.generate("Hi", max_tokens=8, temp=0)
    session.generate("Hi", max_tokens=8, temp=0)
    s = session.stats()
    assert s.tokens_emitted == 16 and s.generations == 2 and s.prompt_tokens > 0
    assert s.timing_us.total >= s.timing_us.verify > 0
    assert s.tokens_per_sec > 0 and s.time_to_first_token_us > 0 and s.prompt_us > 0
    session.reset_stats()
    z = session.stats()
    assert (z.tokens_emitted, z.iters, z.drafts_generated, z.generations) == (0, 0, 0, 0)


def test_stream_pieces_join_to_generate(random_session: MTP) -> None:
    for prompt in PROMPTS:
        pieces = list(random_session.stream(prompt, max_tokens=30, temp=0))
        assert "".join(pieces) == random_session.generate(prompt, max_tokens=30, temp=0)
        assert all(pieces)


def test_every_piece_is_valid_utf8_and_joins(random_session: MTP) -> None:
    # Random byte-level models emit lone continuation and lead bytes; every
    # piece must still be valid text and the join must equal generate().
    text = random_session.generate("ü€", max_tokens=60, temp=0)
    pieces = [e.text for e in random_session.stream_events("ü€", max_tokens=60, temp=0) if isinstance(e, TokenEvent)]
    assert "".join(pieces) == text
    for piece in pieces:
        piece.encode("utf-8")  # a str with lone surrogates would raise


def test_stop_string_across_pieces_is_not_emitted(accept100_model: Model) -> None:
    session = make_session(accept100_model, n_draft=3)
    # Output is "aaaa...": the stop "aaa" spans three single-byte tokens.
    events = list(session.stream_events("Hi", max_tokens=20, temp=0, stop=["aaa"]))
    assert isinstance(events[-1], DoneEvent) and events[-1].finish_reason == "stop"
    assert "".join(e.text for e in events if isinstance(e, TokenEvent)) == ""
    assert session.generate("Hi", max_tokens=20, temp=0, stop=["xyz", "aab"]) == "a" * 20
    assert session.generate("Hi", max_tokens=20, temp=0, stop="zzz") == "a" * 20


def test_partial_stop_prefix_is_released_at_the_end(accept100_model: Model) -> None:
    session = make_session(accept100_model, n_draft=3)
    assert session.generate("Hi", max_tokens=5, temp=0, stop=["aaaaaaab"]) == "aaaaa"


def test_sampled_output_is_reproducible_with_a_seed(random_session: MTP) -> None:
    a = random_session.generate("Hello", max_tokens=30, temp=1.0, seed=42)
    b = random_session.generate("Hello", max_tokens=30, temp=1.0, seed=42)
    assert a == b


# Chi-square critical value at significance 0.001 for 3 degrees of freedom (4 bins).
CHI2_CRITICAL_DF3 = 16.27


def _chi_square(counts: list[int], probabilities: list[float]) -> float:
    total = sum(counts)
    return sum((c - total * p) ** 2 / (total * p) for c, p in zip(counts, probabilities))


@pytest.mark.parametrize("n_draft", [2, "auto"])
def test_sampled_mtp_output_follows_the_target_distribution(tiny_paths, n_draft: int | str) -> None:
    """Lossless in distribution: at temp=1 the tokens MTP emits (accepted drafts and
    the target's own samples at a rejection) are distributed as the target's samples.
    The ``sampling`` model gives every position the same known distribution and its
    head always drafts "a", so drafts are accepted about half the time. With
    n_draft="auto" the draft length changes from iteration to iteration."""
    check_sampled_distribution(Model.load(tiny_paths["sampling"]), n_draft)


def check_sampled_distribution(model: Model, n_draft: int | str, draft_model: Model | None = None) -> None:
    """The body of the test above, for ``model`` (the ``sampling`` tiny model) drafting with
    its own head or ``draft_model`` (e.g. a trimmed head, tests/engine/test_draft_vocab.py)."""
    from mtp_llm.gguf.tiny_models import SAMPLING_TOKENS
    from mtp_llm.parity import forward_with_head

    prompt = "Hi there"
    logits = forward_with_head(model, model.tokenize(prompt))["trunk_logits"][-1]
    weights = np.exp(logits - logits.max())
    weights /= weights.sum()
    target = [float(weights[t]) for t in SAMPLING_TOKENS]
    target.append(1.0 - sum(target))

    # draft_temp=0: the head's argmax, verified by sampling the target and comparing (rejection
    # sampling of drafts from the head's distribution: tests/engine/test_exact_sampling.py).
    sampling = {"temp": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "max_tokens": 4, "draft_temp": 0.0}
    plain = make_session(model, n_draft=0)
    spec = make_session(model, draft_model=draft_model, n_draft=n_draft, n_draft_max=2)
    counts = [0, 0, 0, 0]
    for seed in range(1500):
        ids = token_ids(spec, prompt, seed=seed, **sampling)
        # One random draw per emitted token in both modes: same seed, same logits, same tokens.
        assert ids == token_ids(plain, prompt, seed=seed, **sampling), seed
        for token in ids[1:]:  # the first token is sampled before any draft exists
            counts[SAMPLING_TOKENS.index(token) if token in SAMPLING_TOKENS else 3] += 1

    stats = spec.stats()
    if n_draft == 2:
        # Drafts ["a", "a"]: the first is accepted with p=0.5, the second with 0.5 after that.
        assert 0.33 < stats.acceptance_rate < 0.42, stats.acceptance_rate
        assert stats.acceptance_rate_per_position[0] == pytest.approx(0.5, abs=0.04)
    else:
        assert stats.drafts_generated > 0 and stats.draft_length_counts[0] > 0
    assert _chi_square(counts, target) < CHI2_CRITICAL_DF3, (counts, target)
    # The test has power: accepting drafts too often would shift mass to "a" and fail it.
    biased = [target[0] + 0.05, target[1] - 0.03, target[2] - 0.01, target[3] - 0.01]
    assert _chi_square(counts, biased) > CHI2_CRITICAL_DF3


def test_prompt_as_token_ids(random_session: MTP, random_model: Model) -> None:
    ids = random_model.tokenize("Hello world")
    assert random_session.generate(ids, max_tokens=10, temp=0) == random_session.generate(
        "Hello world", max_tokens=10, temp=0
    )


def test_long_prompt_is_processed_in_chunks(random_model: Model) -> None:
    small_batch = make_session(random_model, n_draft=2, n_batch=8)
    big_batch = make_session(random_model, n_draft=2, n_batch=512)
    prompt = "The quick brown fox jumps over the lazy dog. " * 4
    assert small_batch.generate(prompt, max_tokens=12, temp=0) == big_batch.generate(prompt, max_tokens=12, temp=0)
    assert small_batch.last_stats.prompt_tokens == len(random_model.tokenize(prompt))


def test_grammar_constrains_output(random_session: MTP) -> None:
    text = random_session.generate("Hello", max_tokens=12, temp=0, grammar='root ::= ("yes" | "no") "."')
    assert text in ("yes.", "no.")


def test_print_stats_prints_upstream_line(capfd, accept100_model: Model) -> None:
    session = make_session(accept100_model, n_draft=3)
    session.generate("Hi", max_tokens=8, temp=0)
    session.print_stats()
    out, err = capfd.readouterr()
    assert "draft-mtp" in out + err


def test_json_schema_grammar_output_always_parses(random_session: MTP) -> None:
    import json

    from mtp_llm.chat import json_schema_grammar

    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "ok": {"type": "boolean"}}, "required": ["n", "ok"]}
    grammar = json_schema_grammar(schema)
    for prompt in PROMPTS:
        data = json.loads(random_session.generate(prompt, max_tokens=80, temp=0, grammar=grammar))
        assert set(data) == {"n", "ok"} and isinstance(data["n"], int) and isinstance(data["ok"], bool)


def test_penalty_last_n_minus_one_is_the_whole_context(random_model: Model) -> None:
    """-1 looks back on the slot's whole context, as llama.cpp's tools read it (its sampler alone reads
    -1 as 0: penalties off)."""
    session = make_session(random_model, n_draft=2, n_ctx=512)

    def ids(last_n: int) -> list[int]:
        opts = {"max_tokens": 40, "temp": 0, "repeat_penalty": 3.0, "penalty_last_n": last_n}
        return [e.id for e in session.stream_events("Hello there", **opts) if isinstance(e, TokenEvent)]

    whole = ids(-1)
    assert whole == ids(512)
    assert whole != ids(0)  # the random model repeats one token without penalties
