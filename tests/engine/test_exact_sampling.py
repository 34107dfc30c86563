"""Exact speculative sampling: drafts sampled from the head's distribution q and verified by rejection
(accept with min(1, p/q), else draw from max(0, p - q)) leave the output distributed as plain decoding's.

The ``sampling`` tiny model gives every position the same known distribution p (tokens a, b, c with
0.5, 0.25, 0.15, the rest 0.10 spread over the vocabulary), so two consecutive tokens are independent
draws from p: the tests compare the joint of pairs of emitted tokens with p x p (16 cells), and each
token's marginal with p, by chi-square. Its head always puts "a" first; a high ``draft_temp``
flattens its q far from p, so drafts are often rejected and the residual draws carry the test.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from mtp_llm import MTP, Model, TokenEvent
from mtp_llm.gguf.tiny_models import SAMPLING_TOKENS
from mtp_llm.parity import forward_with_head
from tests.helpers import make_session

PROMPT = "Hi there"
CHI2_P01_DF15 = 30.58  # chi-square critical values at significance 0.01
CHI2_P01_DF3 = 11.34
GENERATIONS = 2000
TOKENS = 5  # the first is sampled before any draft; pairs (1, 2) and (3, 4) are tested


def _bins(token: int) -> int:
    return SAMPLING_TOKENS.index(token) if token in SAMPLING_TOKENS else 3


def target_distribution(model: Model, temp: float, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0) -> np.ndarray:
    """p over the four bins: llama.cpp's chain on the model's logits (top-k, top-p and min-p on the
    untempered softmax, then the temperature)."""
    logits = forward_with_head(model, model.tokenize(PROMPT))["trunk_logits"][-1].astype(np.float64)
    order = np.argsort(-logits, kind="stable")
    kept = order[:top_k] if top_k > 0 else order
    probs = np.exp(logits[kept] - logits[kept].max())
    probs /= probs.sum()
    if top_p < 1.0:
        cut = int(np.searchsorted(np.cumsum(probs), top_p) + 1)
        kept, probs = kept[:cut], probs[:cut]
    if min_p > 0.0:
        keep = probs >= min_p * probs.max()
        kept = kept[keep]
    weights = np.exp((logits[kept] - logits[kept].max()) / temp)
    weights /= weights.sum()
    out = np.zeros(4)
    for token, w in zip(kept, weights):
        out[_bins(int(token))] += w
    return out


def _chi_square(counts: np.ndarray, probabilities: np.ndarray) -> float:
    expected = counts.sum() * probabilities
    mask = expected > 0
    assert counts[~mask].sum() == 0, "a token the target never samples was emitted"
    return float((((counts - expected) ** 2)[mask] / expected[mask]).sum())


def sample_pairs(session: MTP, options: dict[str, object], seeds: range) -> np.ndarray:
    joint = np.zeros((4, 4), dtype=np.int64)
    for seed in seeds:
        ids = [e.id for e in session.stream_events(PROMPT, seed=seed, max_tokens=TOKENS, **options) if isinstance(e, TokenEvent)]
        for k in (1, 3):
            if k + 1 < len(ids):  # an end-of-generation token (in "other") ends a generation early
                joint[_bins(ids[k]), _bins(ids[k + 1])] += 1
    return joint


def check(joint: np.ndarray, p: np.ndarray) -> None:
    assert _chi_square(joint.ravel(), np.outer(p, p).ravel()) < CHI2_P01_DF15, (joint, p)
    marginal = joint.sum(0) + joint.sum(1)
    assert _chi_square(marginal, p) < CHI2_P01_DF3, (marginal, p)
    # Power: a 2% shift from "a" to "b" would be seen.
    shifted = p + np.array([-0.02, 0.02, 0.0, 0.0])
    assert _chi_square(marginal, shifted) > CHI2_P01_DF3, (marginal, shifted)


@pytest.fixture(scope="module")
def sampling_model(tiny_paths: dict[str, Path]) -> Model:
    return Model.load(tiny_paths["sampling"])


@pytest.mark.parametrize(
    ("n_draft", "options", "driver"),
    [
        (1, {"temp": 0.8, "draft_temp": 3.0}, "fused"),
        (3, {"temp": 0.8, "draft_temp": 3.0}, "fused"),
        (3, {"temp": 1.0, "draft_temp": 3.0}, "fused"),
        (3, {"temp": 1.0}, "fused"),
        (3, {"temp": 0.8, "draft_temp": 3.0, "top_k": 3, "top_p": 0.95, "min_p": 0.05}, "fused"),
        (1, {"temp": 0.8, "draft_temp": 3.0}, "upstream"),
        (3, {"temp": 1.0, "draft_temp": 3.0}, "upstream"),
    ],
    ids=["n1-t0.8", "n3-t0.8", "n3-t1.0", "n3-t1.0-head-at-temp", "n3-t0.8-truncated", "llama.cpp-driver-n1-t0.8",
         "llama.cpp-driver-n3-t1.0"],
)
def test_rejection_sampling_follows_the_target_distribution(
    sampling_model: Model, n_draft: int, options: dict, driver: str
) -> None:
    opts = {"top_k": 0, "top_p": 1.0, "min_p": 0.0, **options}
    session = make_session(sampling_model, n_draft=n_draft, fuse_catch_up=driver == "fused")
    assert session.mtp_driver == driver
    joint = sample_pairs(session, opts, range(GENERATIONS))
    p = target_distribution(
        sampling_model, float(opts["temp"]), int(opts["top_k"]), float(opts["top_p"]), float(opts["min_p"])  # type: ignore[arg-type]
    )
    check(joint, p)
    stats = session.stats()
    assert stats.drafts_generated > 0
    if options.get("draft_temp") == 3.0 and "top_k" not in options and driver == "fused":
        # A flat q: many rejections, each drawing the row's token from the residual. (llama.cpp's
        # driver samples among the head's top 10, which its backend sampler keeps: a less flat q.)
        assert stats.acceptance_rate < 0.45, stats.acceptance_rate


@pytest.mark.parametrize("driver", ["fused", "upstream"])
def test_rejection_sampling_in_parallel_slots(sampling_model: Model, driver: str) -> None:
    session = make_session(sampling_model, n_draft=3, n_parallel=2, n_ctx=1024, fuse_catch_up=driver == "fused")
    assert session.mtp_driver == driver
    opts = {"temp": 1.0, "draft_temp": 3.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}
    halves: list[np.ndarray] = []

    def run(seeds: range) -> None:
        halves.append(sample_pairs(session, opts, seeds))

    threads = [threading.Thread(target=run, args=(range(k, GENERATIONS, 2),)) for k in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    check(halves[0] + halves[1], target_distribution(sampling_model, 1.0))


def test_the_head_samples_its_drafts_and_seeds_reproduce(sampling_model: Model) -> None:
    session = make_session(sampling_model, n_draft=3)
    opts = {"temp": 1.0, "draft_temp": 3.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "max_tokens": 40}
    assert session.generate(PROMPT, seed=7, **opts) == session.generate(PROMPT, seed=7, **opts)
    argmax = make_session(sampling_model, n_draft=3)
    argmax.generate(PROMPT, seed=7, **{**opts, "draft_temp": 0.0})
    # The head's argmax is always "a": accepted with p(a) = 0.5. Sampled from a flat q, drafts vary.
    assert argmax.stats().acceptance_rate > session.stats().acceptance_rate


def test_greedy_is_unchanged_by_draft_temp(sampling_model: Model) -> None:
    plain = make_session(sampling_model, n_draft=0)
    spec = make_session(sampling_model, n_draft=3)
    for draft_temp in (None, 0.0, 3.0):
        assert spec.generate(PROMPT, temp=0, max_tokens=24, draft_temp=draft_temp) == plain.generate(
            PROMPT, temp=0, max_tokens=24
        )


def test_rejection_sampling_with_a_trimmed_head(tiny_paths: dict[str, Path], tmp_path: Path, sampling_model: Model) -> None:
    from mtp_llm.gguf.draft_vocab import draft_vocab_ids, special_token_ids, write_trimmed_head
    from mtp_llm.gguf.tiny_models import TOKEN_X

    path = tiny_paths["sampling"]
    counts = np.zeros(sampling_model.n_vocab, dtype=np.int64)
    counts[[TOKEN_X, *SAMPLING_TOKENS]] = 1
    trimmed = Model.load(write_trimmed_head(path, draft_vocab_ids(counts, 40, special_token_ids(path)), tmp_path, "f16"))
    assert trimmed.draft_vocab_size == 40
    session = make_session(sampling_model, draft_model=trimmed, n_draft=3)
    # The head's q covers its 40 tokens only; p covers the whole vocabulary: the residual supplies the rest.
    opts = {"temp": 1.0, "draft_temp": 3.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}
    check(sample_pairs(session, opts, range(GENERATIONS)), target_distribution(sampling_model, 1.0))
    assert session.stats().draft_vocab_size == 40 and session.stats().drafts_generated > 0


def test_rejection_sampling_on_a_checkpointed_target(tiny_paths: dict[str, Path]) -> None:
    """A recurrent target rolls a partial acceptance back by restoring a checkpoint and verifying the
    decided tokens again (a replay): the output keeps plain decoding's distribution. Two samples (plain,
    MTP) of the random hybrid model, binned by its most frequent tokens, tested for homogeneity."""
    hybrid = Model.load(tiny_paths["hybrid"])
    opts = {"temp": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "max_tokens": TOKENS}
    prompt = "Hello"

    def ids(session: MTP, seed: int) -> list[int]:
        return [e.id for e in session.stream_events(prompt, seed=seed, **opts) if isinstance(e, TokenEvent)]

    plain = make_session(hybrid, n_draft=0)
    spec = make_session(hybrid, n_draft=3, rollback="checkpoint")
    assert spec.mtp_driver == "upstream"
    plain_runs = [ids(plain, seed) for seed in range(GENERATIONS)]
    spec_runs = [ids(spec, seed) for seed in range(GENERATIONS, 2 * GENERATIONS)]
    frequent = np.bincount([i for run in plain_runs for i in run[1:]], minlength=hybrid.n_vocab).argsort()[::-1][:3]

    def joint(runs: list[list[int]]) -> np.ndarray:
        bins = {int(token): k for k, token in enumerate(frequent)}
        out = np.zeros((4, 4), dtype=np.int64)
        for run in runs:
            for k in (1, 3):
                if k + 1 < len(run):
                    out[bins.get(run[k], 3), bins.get(run[k + 1], 3)] += 1
        return out.ravel()

    table = np.stack([joint(plain_runs), joint(spec_runs)])
    table = table[:, table.sum(0) > 0]
    expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / table.sum()
    chi2 = float(((table - expected) ** 2 / expected).sum())
    assert chi2 < CHI2_P01_DF15, (chi2, table)
    stats = spec.stats()
    assert stats.replays > 0 and 0 < stats.drafts_accepted < stats.drafts_generated, stats
    # A replay commits the tokens its round decided: one replay for each rejected draft (one draft a
    # round), never a second restore.
    single = make_session(hybrid, n_draft=1, rollback="checkpoint")
    for seed in range(200):
        ids(single, seed)
    stats = single.stats()
    assert stats.replays == stats.drafts_generated - stats.drafts_accepted > 0, stats


def test_rejection_sampling_under_a_grammar(sampling_model: Model) -> None:
    """Under a grammar llama.cpp draws from the chain and, when the grammar rejects the draw, draws again
    over the allowed tokens: P(x) = p(x) A(x) + (1 - sum p A) p_g(x). With top-k 2 that differs from the
    chain over the allowed tokens alone: where the grammar allows [bc], p keeps {a, b} and p_g {b, c}.
    Plain decoding and both drivers' rejection sampling give pairs (a [bc] letter, an [abc] letter)
    distributed as P x P."""
    grammar = "root ::= " + " ".join(["[bc] [abc]"] * 3)
    opts = {"temp": 1.0, "top_k": 2, "top_p": 1.0, "min_p": 0.0, "max_tokens": 6, "grammar": grammar}
    logits = forward_with_head(sampling_model, sampling_model.tokenize(PROMPT))["trunk_logits"][-1].astype(np.float64)
    a, b, c = (float(np.exp(logits[t] - logits.max())) for t in SAMPLING_TOKENS)
    p_b = b / (a + b)  # p over the top 2 {a, b}; the grammar allows b only
    first = np.array([p_b + (1 - p_b) * b / (b + c), (1 - p_b) * c / (b + c)])  # P(b), P(c)
    second = np.array([a / (a + b), b / (a + b)])  # all of {a, b} allowed: P = p
    expected = np.outer(first, second).ravel()

    def pairs(session: MTP, **extra: object) -> np.ndarray:
        counts = np.zeros((2, 2), dtype=np.int64)
        for seed in range(GENERATIONS):
            ids = [e.id for e in session.stream_events(PROMPT, seed=seed, **opts, **extra) if isinstance(e, TokenEvent)]
            assert len(ids) == 6, ids
            for k in (0, 2, 4):
                counts[SAMPLING_TOKENS.index(ids[k]) - 1, SAMPLING_TOKENS.index(ids[k + 1])] += 1
        return counts.ravel()

    # Under a grammar drafts are the head's argmax unless draft_temp is set: both verifications run.
    for session, extra in [
        (make_session(sampling_model, n_draft=0), {}),
        (make_session(sampling_model, n_draft=1), {}),
        (make_session(sampling_model, n_draft=1), {"draft_temp": 1.0}),
        (make_session(sampling_model, n_draft=3), {"draft_temp": 3.0}),
        (make_session(sampling_model, n_draft=3, fuse_catch_up=False), {"draft_temp": 3.0}),
    ]:
        counts = pairs(session, **extra)
        assert _chi_square(counts, expected) < CHI2_P01_DF3, (session.mtp_driver, counts, expected)
        # Power: the chain over the allowed tokens alone (grammar first) would be seen.
        grammar_first = np.outer([b / (b + c), c / (b + c)], second).ravel()
        assert _chi_square(counts, grammar_first) > CHI2_P01_DF3, (counts, grammar_first)
        if session.n_draft:
            assert session.stats().drafts_generated > 0
