"""Synthetic hy_v3 models (mtp_llm.gguf.synthetic): shapes, files, and the acceptance they are built for.

The models are deterministic, so the engine's counters are asserted equal to the replay of the
draft/verify loop (:func:`expected_counters`), not merely close to the requested rate.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mtp_llm import Model
from mtp_llm.stats import MTPStats
from mtp_llm.gguf.synthetic import (
    SyntheticShape,
    expected_counters,
    parse_size,
    spec_of,
    synthetic_model,
    synthetic_shape,
    synthetic_tokens,
)

from tests.helpers import make_session

PROMPTS = ["ROMEO: But soft, what light", "To be, or not to be,", "KING LEAR: Blow, winds", "Of Man's first"]
TOKENS = 48
SIZE = "2M"  # 4096-token vocabulary, n_embd 128, 5 blocks: a 4 MB f16 file, written in well under a second


@pytest.fixture(scope="module")
def synth_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("synthetic")


def _run(
    path: Path, n_draft: int, tokens: int = TOKENS
) -> tuple[list[list[int]], list[list[int]], MTPStats, list[dict[str, Any]]]:
    """Greedy token ids of plain and MTP decoding per prompt, the MTP stats and the replayed counters."""
    from mtp_llm.events import TokenEvent

    model = Model.load(path)
    spec = spec_of(path)
    assert spec is not None
    chain = spec.tokens()
    plain = make_session(model, n_draft=0)
    mtp = make_session(model, n_draft=n_draft)
    plain_ids: list[list[int]] = []
    mtp_ids: list[list[int]] = []
    expected: list[dict[str, Any]] = []
    for prompt in PROMPTS:
        for session, out in ((plain, plain_ids), (mtp, mtp_ids)):
            out.append([e.id for e in session.stream_events(prompt, max_tokens=tokens, temp=0)
                        if isinstance(e, TokenEvent)])
        expected.append(expected_counters(chain, mtp.tokenize_prompt(prompt)[-1], tokens, n_draft))
    return plain_ids, mtp_ids, mtp.stats(), expected


def _totals(expected: list[dict[str, Any]], key: str) -> Any:
    values = [e[key] for e in expected]
    if isinstance(values[0], list):
        return [sum(col) for col in zip(*values)]
    return sum(values)


def test_parse_size() -> None:
    assert parse_size("150M") == 150_000_000
    assert parse_size("1.5B") == 1_500_000_000
    assert parse_size("500k") == 500_000
    assert parse_size(2_000_000) == 2_000_000
    with pytest.raises(ValueError):
        parse_size("lots")


@pytest.mark.parametrize("size", ["2M", "11M", "58M", "150M", "1B", "7B"])
def test_shape_has_the_requested_size_and_real_proportions(size: str) -> None:
    shape = synthetic_shape(size)
    assert abs(math.log(shape.n_params / parse_size(size))) < 0.05
    assert shape.n_embd % 128 == 0 and shape.n_head * shape.head_dim == shape.n_embd
    assert shape.n_head % shape.n_head_kv == 0
    assert shape.head_dim in (64, 128)
    assert 10 <= shape.n_embd / shape.n_layer <= 200 or shape.n_layer <= 5


def test_150m_shape() -> None:
    # The size the iteration-cost issue measures: GPT-2-small-like width, a 32000-token vocabulary.
    assert synthetic_shape("150M") == SyntheticShape(32000, 768, 15, 12, 3, 2304)


def test_tokens_form_one_printable_cycle() -> None:
    t = synthetic_tokens(4096, 0.5)
    start = int(t.succ[ord("a")])
    seen = {start}
    x = int(t.succ[start])
    while x != start:
        assert x not in seen
        seen.add(x)
        x = int(t.succ[x])
    assert len(seen) > 3900  # every printable token; control bytes, high bytes and EOS lead into it
    eos = 263
    assert eos not in seen
    chain = np.array(sorted(seen))
    assert t.good[chain].sum() == round(0.5 * len(chain))
    forced = synthetic_tokens(4096, None)
    assert forced.good.all() and (forced.head_source == np.arange(4096)).all()


def test_files_are_cached_and_deterministic(synth_dir: Path, tmp_path: Path) -> None:
    a = synthetic_model(SIZE, 0.5, "q4_0", synth_dir)
    mtime = a.stat().st_mtime_ns
    assert synthetic_model(SIZE, 0.5, "q4_0", synth_dir) == a
    assert a.stat().st_mtime_ns == mtime
    b = synthetic_model(SIZE, 0.5, "q4_0", tmp_path)
    assert a.name == b.name and a.read_bytes() == b.read_bytes()
    assert "p0.5" in a.name and "q4_0" in a.name and "d128-l5" in a.name
    spec = spec_of(a)
    assert spec is not None and spec.acceptance == 0.5 and spec.fmt == "q4_0"


def test_forced_model_accepts_every_draft(synth_dir: Path) -> None:
    path = synthetic_model(SIZE, None, "f16", synth_dir)
    plain_ids, mtp_ids, stats, expected = _run(path, n_draft=3)
    assert mtp_ids == plain_ids
    assert [e["tokens"] for e in expected] == plain_ids  # the target follows its successor cycle
    assert stats.drafts_generated > 0
    assert stats.drafts_accepted == stats.drafts_generated == _totals(expected, "drafts_generated")
    assert stats.acceptance_rate == 1.0
    # Every full iteration commits 4 tokens; only the last one of a generation drafts fewer.
    assert stats.iters == _totals(expected, "iters") == len(PROMPTS) * math.ceil(TOKENS / 4)


def test_calibrated_model_accepts_at_the_chosen_rate(synth_dir: Path) -> None:
    p, k = 0.5, 3
    path = synthetic_model(SIZE, p, "f16", synth_dir)
    plain_ids, mtp_ids, stats, expected = _run(path, n_draft=k, tokens=160)
    assert mtp_ids == plain_ids
    # Exact: the engine's counters are the replay of the loop over this model's good set.
    assert stats.drafts_generated == _totals(expected, "drafts_generated")
    assert stats.drafts_accepted == _totals(expected, "drafts_accepted")
    assert stats.iters == _totals(expected, "iters")
    drafted, accepted = _totals(expected, "drafted_at"), _totals(expected, "accepted_at")
    rates = [a / d for a, d in zip(accepted, drafted)]
    assert list(stats.acceptance_rate_per_position) == pytest.approx(rates)
    # And close to p. The engine's per-position rate divides by every drafted position, so position
    # i reads about p**i; the head's rate at position i given the earlier drafts were right is
    # accepted_at[i] / accepted_at[i-1]. Each of those n trials sees a fresh token of the cycle,
    # good with probability p independently, so the rate has standard deviation sqrt(p(1-p)/n):
    # 0.034 at position 1 (~220 trials here), 0.07 at position 3 (~55). 3.5 of them bound it.
    trials = [drafted[0], *accepted[:-1]]
    assert trials[-1] > 40
    for i in range(k):
        conditional = accepted[i] / trials[i]
        assert abs(conditional - p) < 3.5 * math.sqrt(p * (1 - p) / trials[i]), (i, conditional, trials[i])


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
def test_quantized_models_load_and_keep_their_acceptance(synth_dir: Path, fmt: str) -> None:
    path = synthetic_model(SIZE, 0.75, fmt, synth_dir)
    model = Model.load(path)
    assert model.architecture == "hy_v3"
    plain_ids, mtp_ids, stats, expected = _run(path, n_draft=2)
    assert mtp_ids == plain_ids
    assert stats.drafts_accepted == _totals(expected, "drafts_accepted")
    assert stats.drafts_generated == _totals(expected, "drafts_generated")


def test_quantized_file_sizes(synth_dir: Path) -> None:
    sizes = {fmt: synthetic_model(SIZE, None, fmt, synth_dir).stat().st_size for fmt in ("f16", "q8_0", "q4_0")}
    # Matrices dominate: q8_0 stores 34 bytes and q4_0 18 bytes per 32 weights, f16 64.
    assert 0.5 < sizes["q8_0"] / sizes["f16"] < 0.56
    assert 0.27 < sizes["q4_0"] / sizes["f16"] < 0.31


# ------------------------------------------------------------ cost curve ---


def test_cost_model_arithmetic() -> None:
    from mtp_llm.costs import CostCurve, accepted_distribution, expected_committed

    assert accepted_distribution(3, 0.5) == [0.5, 0.25, 0.125, 0.125]
    assert expected_committed(3, 1.0) == 4 and expected_committed(2, 0.5) == 1.75
    # Passes that cost nothing beyond the verify, which costs what one row does: the speedup is
    # the tokens committed per iteration.
    free = CostCurve(target_ms=(1.0, 1.0, 1.0), sample_ms=0.0, draft_ms=(0.0, 0.0), catch_up_ms=(0.0, 0.0, 0.0))
    assert free.speedup(2, 1.0) == 3.0 and free.speedup(1, 0.5) == 1.5
    assert free.best(0.9) == (2, pytest.approx(1 + 0.9 + 0.81))
    # The issue's 149M f16 figures: a 2-row verify at 1.58x and the head at 0.45x of a one-row pass
    # per iteration give n_draft=1 at 100% acceptance 2 / 2.03 = 0.99x.
    issue = CostCurve(target_ms=(9.1, 14.3), sample_ms=0.0, draft_ms=(4.1,), catch_up_ms=(0.0, 0.0))
    assert issue.speedup(1, 1.0) == pytest.approx(2 * 9.1 / (14.3 + 4.1))


def test_weight_bytes_of_a_synthetic_model(synth_dir: Path) -> None:
    from mtp_llm.costs import weight_bytes

    path = synthetic_model(SIZE, 0.5, "f16", synth_dir)
    spec = spec_of(path)
    assert spec is not None
    s = spec.shape
    w = weight_bytes(path)
    norms = (2 * s.n_embd + 2 * s.head_dim) * 4  # f32 per block
    matrices = 2 * (s.block_params() - 2 * s.n_embd - 2 * s.head_dim)  # f16
    output = 2 * s.n_vocab * s.n_embd
    assert w["target_pass"] == output + s.n_layer * (matrices + norms)
    # The head: its block, eh_proj (f16), enorm/hnorm/shared_head_norm (f32) and the shared output
    # matrix; the calibration table nextn.embed_tokens is read one row per token and not counted.
    assert w["head_pass"] == matrices + norms + 2 * 2 * s.n_embd**2 + 3 * 4 * s.n_embd + output


def test_cost_probe_times_every_pass(synth_dir: Path) -> None:
    from tests.helpers import THREADS

    from mtp_llm.costs import markdown, measure_costs

    model = Model.load(synthetic_model(SIZE, None, "f16", synth_dir))
    curve = measure_costs(model, n_draft=2, n_threads=THREADS, fill=32, reps=3, warmup=1)
    assert len(curve.target_ms) == 3 and len(curve.catch_up_ms) == 3 and len(curve.draft_ms) == 2
    assert all(t > 0 for t in (*curve.target_ms, *curve.draft_ms, *curve.catch_up_ms, curve.sample_ms))
    assert all(lo <= med for lo, med in zip(curve.target_min_ms, curve.target_ms))
    assert curve.meta["n_threads"] == THREADS and curve.meta["fill"] == 32
    # The engine's fused driver: a draft of k after j accepted drafts, for every j <= k.
    assert curve.driver == "fused" and [len(row) for row in curve.fused_ms] == [2, 3]
    assert curve.head_ms(2, 1) == curve.fused_ms[1][1]
    assert curve.head_ms(2, 1, "upstream") == curve.draft_ms[1] + curve.catch_up_ms[1]
    upstream = measure_costs(model, n_draft=1, n_threads=THREADS, fill=8, reps=1, warmup=0, fuse_catch_up=False)
    assert upstream.driver == "upstream"
    table = markdown(curve, mark=1.0)
    assert "| 1.00 (this model) |" in table and "n_draft=2" in table
    # After the probe, the model still decodes normally in a session.
    session = make_session(model, n_draft=2)
    session.generate("abc", max_tokens=8, temp=0)
    assert session.stats().acceptance_rate == 1.0


def test_cost_probe_without_a_head(tiny_paths: dict[str, Path]) -> None:
    from tests.helpers import THREADS

    from mtp_llm.costs import measure_costs

    model = Model.load(tiny_paths["random"], load_mtp=False)
    curve = measure_costs(model, n_draft=1, n_threads=THREADS, fill=8, reps=2, warmup=0)
    assert len(curve.target_ms) == 2 and curve.draft_ms == () and curve.catch_up_ms == ()
