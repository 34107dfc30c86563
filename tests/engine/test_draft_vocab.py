"""Trimmed draft vocabularies (mtp_llm.gguf.draft_vocab, patch 0007): drafting with a head that
scores N tokens is lossless, counts exactly where the drafted tokens are kept, reports its size,
and bad ``d2t`` tensors raise ModelLoadError before llama.cpp sees them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mtp_llm import MTP, InvalidOptionError, Model, ModelLoadError
from mtp_llm.draft_vocab import PROMPTS, choose_draft_vocab, token_frequencies
from mtp_llm.events import TokenEvent
from mtp_llm.gguf.draft_head import DRAFT_VOCAB_KEY, write_draft_head
from mtp_llm.gguf.draft_vocab import draft_vocab_ids, special_token_ids, trim_embedded_head, write_trimmed_head
from mtp_llm.gguf.synthetic import spec_of, synthetic_model
from mtp_llm.stats import MTPStats
from tests.engine.test_generation import check_sampled_distribution
from tests.helpers import make_session

PROMPTS_SYN = ["ROMEO: But soft, what light", "To be, or not to be,", "KING LEAR: Blow, winds", "Of Man's first"]
TOKENS = 40
SIZE = "2M"  # hy_v3, 4096-token vocabulary, n_embd 128
N_DRAFT = 3
DRIVERS: dict[str, dict[str, Any]] = {"fused": {}, "upstream": {"fuse_catch_up": False}}


@pytest.fixture(scope="module")
def synth_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("draft_vocab")


def _generate(model: Model, draft: Model | None, n_draft: int, **kw: Any) -> tuple[list[list[int]], MTPStats, int]:
    session = make_session(model, draft_model=draft, n_draft=n_draft, **kw)
    ids = [
        [e.id for e in session.stream_events(p, max_tokens=TOKENS, temp=0) if isinstance(e, TokenEvent)]
        for p in PROMPTS_SYN
    ]
    return ids, session.stats(), session.draft_vocab_size


def _walked(path: Path, model: Model) -> np.ndarray:
    """Counts with 1 at every token the forced synthetic model's head drafts on PROMPTS_SYN (the
    chain from each prompt's last token, TOKENS + N_DRAFT steps), 0 elsewhere."""
    spec = spec_of(path)
    assert spec is not None
    succ = spec.tokens().succ
    out = []
    for p in PROMPTS_SYN:
        y = model.tokenize(p)[-1]
        for _ in range(TOKENS + N_DRAFT + 1):
            y = int(succ[y])
            out.append(y)
    counts = np.zeros(model.n_vocab, dtype=np.int64)
    counts[out] = 1
    return counts


@pytest.mark.parametrize("driver", DRIVERS)
def test_forced_model_trimmed_head_counts_exactly_as_the_full_one(synth_dir: Path, driver: str) -> None:
    path = synthetic_model(SIZE, None, "f16", synth_dir)
    model = Model.load(path)
    counts = _walked(path, model)
    ids = draft_vocab_ids(counts, 512, special_token_ids(path))
    assert set(np.flatnonzero(counts)) <= set(ids) and len(ids) == 512
    trimmed = Model.load(write_trimmed_head(path, ids, synth_dir, "q8_0"))
    full = Model.load(write_draft_head(path, synth_dir, "q8_0"))
    assert (trimmed.draft_vocab_size, full.draft_vocab_size, model.draft_vocab_size) == (512, 4096, 4096)
    plain, _, size0 = _generate(model, None, 0)
    want, full_stats, _ = _generate(model, full, N_DRAFT, **DRIVERS[driver])
    got, stats, size = _generate(model, trimmed, N_DRAFT, **DRIVERS[driver])
    assert got == want == plain
    assert stats.acceptance_rate == 1.0 and stats.drafts_generated > 0
    for field in ("drafts_generated", "drafts_accepted", "iters", "acceptance_rate_per_position"):
        assert getattr(stats, field) == getattr(full_stats, field), field
    assert (size, stats.draft_vocab_size, full_stats.draft_vocab_size, size0) == (512, 512, 4096, 0)


@pytest.mark.parametrize("driver", DRIVERS)
def test_calibrated_model_with_a_small_trimmed_head_decodes_as_plain(synth_dir: Path, driver: str) -> None:
    # Most drafted tokens are outside the 300 kept: acceptance drops, output does not change.
    path = synthetic_model(SIZE, 0.75, "f16", synth_dir)
    model = Model.load(path)
    ids = draft_vocab_ids(np.zeros(model.n_vocab, dtype=np.int64), 300, special_token_ids(path))
    trimmed = Model.load(write_trimmed_head(path, ids, synth_dir, "q4_0"))
    plain, _, _ = _generate(model, None, 0)
    got, stats, _ = _generate(model, trimmed, N_DRAFT, **DRIVERS[driver])
    _, full_stats, _ = _generate(model, None, N_DRAFT, **DRIVERS[driver])
    assert got == plain
    assert stats.drafts_generated > 0 and stats.acceptance_rate < full_stats.acceptance_rate


def test_head_logits_are_the_full_heads_rows_and_minus_inf_elsewhere(synth_dir: Path) -> None:
    # The scatter (patch 0007): kept ids carry the full head's logits, the others -inf, so a
    # softmax over the row (p_min's draft probability, llama.cpp's samplers) is a proper one.
    from mtp_llm.parity import forward_with_head

    path = synthetic_model(SIZE, 0.75, "f16", synth_dir)
    model = Model.load(path)
    ids = draft_vocab_ids(np.arange(model.n_vocab)[::-1].copy(), 700, special_token_ids(path))
    trimmed = Model.load(write_trimmed_head(path, ids, synth_dir, "f16"))
    full = Model.load(write_draft_head(path, synth_dir, "f16"))
    tokens = model.tokenize("KING LEAR: Blow, winds")
    got = np.asarray(forward_with_head(model, tokens, head=trimmed)["head_logits"])
    want = np.asarray(forward_with_head(model, tokens, head=full)["head_logits"])
    mask = np.zeros(model.n_vocab, dtype=bool)
    mask[ids] = True
    assert np.all(np.isneginf(got[:, ~mask]))
    np.testing.assert_allclose(got[:, mask], want[:, mask], rtol=1e-5, atol=1e-4)
    p = np.exp(got - got.max(axis=1, keepdims=True))
    assert np.all(np.isfinite(p)) and np.all(p[:, ~mask] == 0)


def test_p_min_confidence_with_a_trimmed_head(synth_dir: Path) -> None:
    path = synthetic_model(SIZE, None, "f16", synth_dir)
    model = Model.load(path)
    counts = _walked(path, model)
    trimmed = Model.load(write_trimmed_head(path, draft_vocab_ids(counts, 512), synth_dir, "f16"))
    plain, _, _ = _generate(model, None, 0)
    got, stats, _ = _generate(model, trimmed, N_DRAFT, p_min=0.5)
    assert got == plain and stats.acceptance_rate == 1.0 and stats.drafts_generated > 0


def test_sampled_output_follows_the_target_distribution_with_a_trimmed_head(tiny_paths: dict[str, Path],
                                                                            tmp_path: Path) -> None:
    from mtp_llm.gguf.tiny_models import SAMPLING_TOKENS, TOKEN_X

    path = tiny_paths["sampling"]
    model = Model.load(path)
    counts = np.zeros(model.n_vocab, dtype=np.int64)
    counts[[TOKEN_X, *SAMPLING_TOKENS]] = 1
    ids = draft_vocab_ids(counts, 40, special_token_ids(path))
    trimmed = Model.load(write_trimmed_head(path, ids, tmp_path, "f16"))
    assert trimmed.draft_vocab_size == 40
    check_sampled_distribution(model, 2, draft_model=trimmed)


def test_hybrid_qwen35_trimmed_head(tiny_paths: dict[str, Path], tmp_path: Path) -> None:
    path = tiny_paths["hybrid"]
    model = Model.load(path)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("The quick brown fox jumps over the lazy dog.\n" * 50)
    sidecar = write_trimmed_head(path, choose_draft_vocab(path, 128, corpus), tmp_path, "q8_0")
    assert sidecar.name == "mtp-hybrid-q8_0-v128.gguf"
    trimmed = Model.load(sidecar)
    assert trimmed.draft_vocab_size == 128
    for kw in DRIVERS.values():
        plain = make_session(model, n_draft=0)
        spec = make_session(model, draft_model=trimmed, n_draft=2, **kw)
        for p in ("Hello", "The quick brown fox"):
            assert spec.generate(p, max_tokens=24, temp=0) == plain.generate(p, max_tokens=24, temp=0)
        assert spec.stats().drafts_generated > 0 and spec.stats().draft_vocab_size == 128


def test_embedded_trimmed_head(synth_dir: Path, tmp_path: Path) -> None:
    import gguf

    path = synthetic_model(SIZE, None, "q8_0", synth_dir)
    model = Model.load(path)
    counts = _walked(path, model)
    out = trim_embedded_head(path, tmp_path / "embedded.gguf", draft_vocab_ids(counts, 600))
    reader = gguf.GGUFReader(str(out))
    src = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}
    tensors = {t.name: t for t in reader.tensors}
    assert reader.fields[DRAFT_VOCAB_KEY].contents() == 600
    assert set(tensors) == set(src) | {"d2t", "blk.5.nextn.shared_head_head.weight"}
    for name, t in src.items():  # every source tensor byte for byte
        assert np.array_equal(np.asarray(t.data), np.asarray(tensors[name].data)), name
    d2t = np.asarray(tensors["d2t"].data)
    head = np.asarray(tensors["blk.5.nextn.shared_head_head.weight"].data)
    assert np.array_equal(head, np.asarray(src["output.weight"].data)[d2t])  # rows gathered as stored
    embedded = Model.load(out)
    assert embedded.draft_vocab_size == 600
    plain, _, _ = _generate(Model.load(path), None, 0)
    got, stats, size = _generate(embedded, None, N_DRAFT)
    assert got == plain and stats.acceptance_rate == 1.0 and size == 600
    assert Model.load(out, load_mtp=False).n_vocab == model.n_vocab  # the trunk loads without the head


def test_token_frequencies_from_generations(tiny_paths: dict[str, Path]) -> None:
    model = Model.load(tiny_paths["random"])
    counts = token_frequencies(model, prompts=PROMPTS[:2], max_tokens=8, n_threads=1)
    assert counts.shape == (model.n_vocab,) and counts.sum() == sum(
        len(model.tokenize(p, add_special=True, parse_special=True)) + 8 for p in PROMPTS[:2]
    )


def test_draft_vocab_ids_keeps_control_tokens_and_sorts() -> None:
    counts = np.array([0, 5, 1, 9, 0, 3])
    assert draft_vocab_ids(counts, 3, keep=[4]).tolist() == [1, 3, 4]
    assert draft_vocab_ids(counts, 6).tolist() == list(range(6))
    with pytest.raises(InvalidOptionError, match="between"):
        draft_vocab_ids(counts, 1, keep=[0, 4])


def _rewrite(src: Path, dst: Path, d2t: np.ndarray | None, drop: str | None = None) -> Path:
    """``src`` with its d2t replaced by ``d2t`` (None: removed) and the tensor ``drop`` left out."""
    import gguf

    from mtp_llm.gguf.common import copy_metadata, write_streamed

    reader = gguf.GGUFReader(str(src))
    entries: list[Any] = [
        (t.name, tuple(int(d) for d in reversed(t.shape)), t.tensor_type, (lambda t=t: np.asarray(t.data)))
        for t in reader.tensors if t.name not in ("d2t", drop)
    ]
    if d2t is not None:
        qtype = {np.dtype(np.int64): gguf.GGMLQuantizationType.I64, np.dtype(np.int32): gguf.GGMLQuantizationType.I32}
        entries.append(("d2t", d2t.shape, qtype[d2t.dtype], lambda: d2t))
    writer = gguf.GGUFWriter(str(dst), str(reader.fields["general.architecture"].contents()))
    copy_metadata(reader, writer, skip=("general.architecture",))
    write_streamed(writer, entries)
    return dst


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("out of range", "d2t\\[3\\] = 4096 is not a token id"),
        ("negative", "d2t\\[0\\] = -1 is not a token id"),
        ("repeated", "lists token 7 twice"),
        ("wrong type", "1-D I64 tensor, not i32"),
        ("length mismatch", "has 64 rows but d2t has 63 entries"),
        ("no LM head", "shared_head_head.weight with 64 rows; it is absent"),
        ("too long", "d2t has 5000 entries"),
    ],
)
def test_bad_d2t_raises_model_load_error(synth_dir: Path, tmp_path: Path, case: str, message: str) -> None:
    path = synthetic_model(SIZE, None, "f16", synth_dir)
    good = write_trimmed_head(path, np.arange(64), tmp_path, "f16")
    assert Model.load(good).draft_vocab_size == 64
    d2t = np.arange(64, dtype=np.int64)
    drop = None
    if case == "out of range":
        d2t[3] = 4096
    elif case == "negative":
        d2t[0] = -1
    elif case == "repeated":
        d2t[8] = 7
    elif case == "wrong type":
        d2t = d2t.astype(np.int32)
    elif case == "length mismatch":
        d2t = d2t[:63]
    elif case == "no LM head":
        drop = "blk.5.nextn.shared_head_head.weight"
    else:
        d2t = np.arange(5000, dtype=np.int64)
    bad = _rewrite(good, tmp_path / "bad.gguf", d2t, drop)
    with pytest.raises(ModelLoadError, match=message):
        Model.load(bad)


def test_d2t_on_an_architecture_without_the_graph(tiny_paths: dict[str, Path], tmp_path: Path) -> None:
    bad = _rewrite(tiny_paths["glm4-nextn"], tmp_path / "glm4-d2t.gguf", np.arange(8, dtype=np.int64))
    with pytest.raises(ModelLoadError, match="architecture 'glm4' has no MTP graph for one"):
        Model.load(bad)


def test_trimming_errors(tiny_paths: dict[str, Path], tmp_path: Path) -> None:
    trimmed = write_trimmed_head(tiny_paths["random"], np.arange(32), tmp_path, "f16")
    with pytest.raises(InvalidOptionError, match="already has a trimmed draft vocabulary"):
        write_trimmed_head(trimmed, np.arange(16), tmp_path, "f16")
    with pytest.raises(InvalidOptionError, match="distinct token ids"):
        write_trimmed_head(tiny_paths["random"], np.array([1, 1]), tmp_path, "f16")


def test_cli_writes_a_trimmed_sidecar_that_loads(tiny_paths: dict[str, Path], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from mtp_llm.cli import main

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("Hello world. The quick brown fox.\n" * 20)
    args = ["draft-head", str(tiny_paths["random"]), "--draft-vocab", "96", "--type", "q8_0",
            "--corpus", str(corpus), "--out", str(tmp_path)]
    assert main(args) == 0
    out = tmp_path / "mtp-random-q8_0-v96.gguf"
    assert str(out) in capsys.readouterr().out
    head = Model.load(out)
    assert head.draft_vocab_size == 96 and head.is_mtp_sidecar
    model = Model.load(tiny_paths["random"])
    spec, plain = make_session(model, draft_model=head, n_draft=2), make_session(model, n_draft=0)
    assert spec.generate("Hello", max_tokens=16, temp=0) == plain.generate("Hello", max_tokens=16, temp=0)
    assert main(["draft-head", str(tiny_paths["glm4-nextn"]), "--draft-vocab", "8", "--out", str(tmp_path)]) == 2


def test_llama_smollm2_trimmed_head(tmp_path: Path) -> None:
    # The llama architecture (patch 0005's MTP graph) on the real model: its head's LM matrix is the
    # tied Q8_0 token_embd, so the trimmed head adds blk.30.nextn.shared_head_head (8192 rows) + d2t.
    from mtp_llm import smollm2
    from mtp_llm.parity import forward_with_head

    converted = smollm2.converted_path(None)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("What is the capital of France? The capital of France is Paris.\n" * 20)
    model = Model.load(converted)
    ids = draft_vocab_ids(token_frequencies(model, corpus), 8192, special_token_ids(converted))
    trimmed = Model.load(trim_embedded_head(converted, tmp_path / "smollm2-v8192.gguf", ids))
    assert trimmed.draft_vocab_size == 8192 and model.draft_vocab_size == model.n_vocab == 49152
    prompt = model.tokenize(model.apply_chat_template([("user", "Why is the sky blue?")]), parse_special=True)
    got = np.asarray(forward_with_head(trimmed, prompt, n_threads=1)["head_logits"])
    want = np.asarray(forward_with_head(model, prompt, n_threads=1)["head_logits"])
    mask = np.zeros(model.n_vocab, dtype=bool)
    mask[ids] = True
    assert np.all(np.isneginf(got[:, ~mask]))
    np.testing.assert_allclose(got[:, mask], want[:, mask], rtol=1e-4, atol=1e-3)
    plain = MTP(trimmed, n_draft=0, n_threads=1, n_ctx=256, flash_attn=True)
    text = plain.generate(prompt, max_tokens=16, temp=0)
    for kw in DRIVERS.values():  # flash attention: greedy MTP == plain on this model (docs/default-model.md)
        spec = MTP(trimmed, n_draft=3, n_threads=1, n_ctx=256, flash_attn=True, **kw)
        assert spec.generate(prompt, max_tokens=16, temp=0) == text
        assert spec.stats().drafts_generated > 0 and spec.draft_vocab_size == 8192
        spec.close()
    plain.close()


def test_bench_costs_with_a_trimmed_head(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from mtp_llm.cli import main

    args = ["bench", "--costs", "--draft-vocab", "600", "--synthetic", "2M", "--n-draft", "1,2", "--cost-reps", "3",
            "--warmup", "0", "--tokens", "8", "--fill", "16", "--threads", "1", "--out", str(tmp_path)]
    assert main(args) == 0
    assert "Trimmed / full head pass" in capsys.readouterr().out
    result = json.loads((tmp_path / "costs-draft-vocab.json").read_text())
    assert {k: v["draft_vocab_size"] for k, v in result.items()} == {"full": 4096, "trimmed": 600}
    assert all(len(v["draft_ms"]) == 2 for v in result.values())


def test_requantizing_a_trimmed_sidecar_keeps_its_vocabulary(tiny_paths: dict[str, Path], tmp_path: Path) -> None:
    import gguf

    trimmed = write_trimmed_head(tiny_paths["random"], np.arange(0, 200, 2), tmp_path, "f16")
    again = write_draft_head(trimmed, tmp_path / "again.gguf", "q8_0")
    reader = gguf.GGUFReader(str(again))
    assert reader.fields[DRAFT_VOCAB_KEY].contents() == 100
    assert np.array_equal(np.asarray({t.name: t for t in reader.tensors}["d2t"].data), np.arange(0, 200, 2))
    model = Model.load(tiny_paths["random"])
    spec, plain = make_session(model, draft_model=Model.load(again), n_draft=2), make_session(model, n_draft=0)
    assert spec.generate("Hello", max_tokens=16, temp=0) == plain.generate("Hello", max_tokens=16, temp=0)
    assert spec.draft_vocab_size == 100


def test_two_trimmed_heads(tiny_paths: dict[str, Path], tmp_path: Path) -> None:
    # Chained hy_v3 heads (llama.cpp's driver): each head block gets its own N-row LM head.
    import dataclasses

    import gguf

    from mtp_llm.gguf.hyv3 import read_hy_v3, write_hy_v3

    config, tensors, vocab, _ = read_hy_v3(tiny_paths["random"])
    head = f"blk.{config.n_layer}."
    tensors.update({n.replace(head, f"blk.{config.n_layer + 1}."): t for n, t in list(tensors.items()) if n.startswith(head)})
    path = write_hy_v3(tmp_path / "two-heads.gguf", dataclasses.replace(config, n_nextn=2), tensors, vocab)
    sidecar = write_trimmed_head(path, np.arange(120), tmp_path, "q8_0")
    shapes = {t.name: tuple(int(d) for d in t.shape) for t in gguf.GGUFReader(str(sidecar)).tensors}
    lm = [n for n in shapes if n.endswith("shared_head_head.weight")]
    assert len(lm) == 2 and all(shapes[n][1] == 120 for n in lm) and "output.weight" not in shapes
    model = Model.load(path)
    spec, plain = make_session(model, draft_model=Model.load(sidecar), n_draft=2), make_session(model, n_draft=0)
    assert spec.mtp_driver == "upstream"
    for p in ("Hello", "The quick brown fox"):
        assert spec.generate(p, max_tokens=16, temp=0) == plain.generate(p, max_tokens=16, temp=0)
    assert spec.stats().drafts_generated > 0
