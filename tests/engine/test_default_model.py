"""The Shakespeare test model (tests/models, a fast hy_v3 model with a trained head): size, tokenizer, export
parity with PyTorch, losslessness, acceptance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mtp_llm import MTP, Model
from mtp_llm.parity import compare_with_reference

from tests.helpers import THREADS, make_session
from tests.helpers.shakespeare import (
    SHAKESPEARE_MODEL,
    SHAKESPEARE_REFERENCE,
    SHAKESPEARE_TOKENS,
    TEST_MODELS_DIR,
    shakespeare_model_path,
    shakespeare_split_paths,
)

ROOT = Path(__file__).resolve().parents[2]
HELD_OUT = json.loads((ROOT / "benchmarks" / "prompts" / "heldout.json").read_text())["prompts"]
# Export parity: llama.cpp (f16 weights, f16 KV cache) against the float32 PyTorch model.
PARITY_TOLERANCE = 2e-3


@pytest.fixture(scope="module")
def default_model() -> Model:
    return Model.load(shakespeare_model_path())


def test_default_model_is_shipped_and_small() -> None:
    assert shakespeare_model_path() == SHAKESPEARE_MODEL
    total = sum(p.stat().st_size for p in TEST_MODELS_DIR.iterdir())
    assert total < 40 * 1024 * 1024


def test_default_model_metadata(default_model: Model) -> None:
    assert default_model.architecture == "hy_v3"
    assert default_model.n_mtp_heads == 1 and default_model.has_mtp_head
    assert default_model.n_vocab == 4096 and default_model.n_embd == 384


def test_tokenizer_matches_training_tokenizer(default_model: Model) -> None:
    cases = json.loads(SHAKESPEARE_TOKENS.read_text())["cases"]
    assert len(cases) >= 10
    for case in cases:
        assert default_model.tokenize(case["text"], add_special=False, parse_special=False) == case["ids"], case
        assert default_model.detokenize(case["ids"]) == case["text"]


def test_export_matches_pytorch_embedded() -> None:
    diffs = compare_with_reference(SHAKESPEARE_MODEL, SHAKESPEARE_REFERENCE, n_threads=THREADS)
    assert all(d < PARITY_TOLERANCE for d in diffs.values()), diffs


def test_export_matches_pytorch_trunk_plus_sidecar() -> None:
    trunk, sidecar = shakespeare_split_paths()
    diffs = compare_with_reference(trunk, SHAKESPEARE_REFERENCE, sidecar=sidecar, n_threads=THREADS)
    assert all(d < PARITY_TOLERANCE for d in diffs.values()), diffs


@pytest.mark.parametrize("n_draft", [1, 2, 3, 4])
def test_greedy_mtp_equals_plain_on_default_model(default_model: Model, n_draft: int) -> None:
    plain = make_session(default_model, n_draft=0)
    spec = make_session(default_model, n_draft=n_draft)
    for prompt in HELD_OUT[:4]:
        expected = [e.id for e in plain.stream_events(prompt, max_tokens=48, temp=0) if hasattr(e, "id")]
        got = [e.id for e in spec.stream_events(prompt, max_tokens=48, temp=0) if hasattr(e, "id")]
        assert got == expected
    assert spec.stats().drafts_accepted > 0


def test_split_default_model_equals_embedded(default_model: Model) -> None:
    trunk, sidecar = shakespeare_split_paths()
    split = make_session(Model.load(trunk), draft_model=Model.load(sidecar), n_draft=3)
    embedded = make_session(default_model, n_draft=3)
    for prompt in HELD_OUT[:2]:
        assert split.generate(prompt, max_tokens=32, temp=0) == embedded.generate(prompt, max_tokens=32, temp=0)


def acceptance_on_held_out(model: Model, n_draft: int) -> MTP:
    session = make_session(model, n_draft=n_draft, n_ctx=1024)
    for prompt in HELD_OUT:
        session.generate(prompt, max_tokens=64, temp=0)
    return session


def test_acceptance_targets_on_held_out_prompts(default_model: Model) -> None:
    one = acceptance_on_held_out(default_model, 1).stats()
    three = acceptance_on_held_out(default_model, 3).stats()
    assert one.acceptance_rate >= 0.6, one.summary()
    assert three.mean_accepted_length >= 2.0, three.summary()
