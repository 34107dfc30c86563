"""MTP on a hybrid target (qwen35: Gated DeltaNet + full attention) in both
rollback modes: recurrent-state snapshots ("rs") and checkpoint save/restore."""

from __future__ import annotations

import pytest

from mtp_llm import MTP, Model, TokenEvent

from tests.helpers import make_session

PROMPTS = ["Hello", "The quick brown fox jumps over the lazy dog.", "a", "Once upon a time, in a land far away"]
MODES = ["rs", "checkpoint"]


def token_ids(session: MTP, prompt: str, **opts: object) -> list[int]:
    return [e.id for e in session.stream_events(prompt, **opts) if isinstance(e, TokenEvent)]


@pytest.fixture(scope="module")
def hybrid_model(tiny_paths) -> Model:
    model = Model.load(tiny_paths["hybrid"])
    assert model.architecture == "qwen35"
    assert model.n_mtp_heads == 1
    return model


@pytest.fixture(scope="module")
def plain_ids(hybrid_model: Model) -> dict[str, list[int]]:
    plain = make_session(hybrid_model, n_draft=0)
    return {p: token_ids(plain, p, max_tokens=32, temp=0) for p in PROMPTS}


@pytest.mark.parametrize("mode", MODES)
def test_rollback_mode_reported(hybrid_model: Model, mode: str) -> None:
    assert make_session(hybrid_model, n_draft=3, rollback=mode).rollback_mode == mode


def test_auto_rollback_is_rs(hybrid_model: Model) -> None:
    assert make_session(hybrid_model, n_draft=2).rollback_mode == "rs"


@pytest.mark.parametrize("n_draft", [1, 2, 3, 4])
@pytest.mark.parametrize("mode", MODES)
def test_greedy_mtp_equals_plain_decoding(
    hybrid_model: Model, plain_ids: dict[str, list[int]], mode: str, n_draft: int
) -> None:
    spec = make_session(hybrid_model, n_draft=n_draft, rollback=mode)
    for prompt in PROMPTS:
        got = token_ids(spec, prompt, max_tokens=32, temp=0)
        assert got == plain_ids[prompt], (mode, n_draft, prompt)
        assert len(got) == 32
    s = spec.stats()
    # The head is right only part of the time: both accepted and rejected
    # drafts occur, so rejected ones really are rolled back.
    assert 0 < s.drafts_accepted < s.drafts_generated
    assert s.tokens_emitted == 32 * len(PROMPTS)


def test_rs_mode_needs_no_checkpoints(hybrid_model: Model) -> None:
    session = make_session(hybrid_model, n_draft=3, rollback="rs")
    for prompt in PROMPTS:
        session.generate(prompt, max_tokens=32, temp=0)
    s = session.stats()
    assert s.replays == 0
    assert s.timing_us.ckpt == 0
    assert s.mean_accepted_length == pytest.approx(1.0 + s.drafts_accepted / s.iters)


def test_checkpoint_mode_saves_state_and_does_not_count_replays(hybrid_model: Model) -> None:
    session = make_session(hybrid_model, n_draft=3, rollback="checkpoint")
    for prompt in PROMPTS:
        session.generate(prompt, max_tokens=32, temp=0)
    s = session.stats()
    assert s.timing_us.ckpt > 0
    # Every pass that rejects a draft restores the checkpoint and re-verifies
    # the tokens it did accept (a replay).
    assert s.replays > 0
    assert s.iters > s.replays
    assert s.drafts_accepted <= s.drafts_generated
    assert s.acceptance_rate == pytest.approx(s.drafts_accepted / s.drafts_generated)
    # Acceptance is measured over drafting passes only, never over replays.
    drafting_passes = s.iters - s.replays
    assert s.mean_accepted_length == pytest.approx(1.0 + s.drafts_accepted / drafting_passes)
    assert all(0.0 <= r <= 1.0 for r in s.acceptance_rate_per_position)

