"""Quantized draft heads (mtp_llm.gguf.draft_head): the sidecar's contents, and that drafting
with it leaves greedy output unchanged and keeps the acceptance of the full-precision head."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mtp_llm import InvalidOptionError, MissingMTPHeadError, Model, ModelLoadError, MTPError
from mtp_llm.events import TokenEvent
from mtp_llm.gguf.draft_head import draft_head_path, write_draft_head
from mtp_llm.gguf.synthetic import expected_counters, spec_of, synthetic_model
from mtp_llm.stats import MTPStats

from tests.helpers import make_session

PROMPTS = ["ROMEO: But soft, what light", "To be, or not to be,", "KING LEAR: Blow, winds", "Of Man's first"]
TOKENS = 48
SIZE = "2M"  # 4096-token vocabulary, n_embd 128, 5 blocks + the head: a 4 MB f16 file


@pytest.fixture(scope="module")
def synth_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("draft_head")


def _generate(model: Model, draft: Model | None, n_draft: int) -> tuple[list[list[int]], MTPStats]:
    session = make_session(model, draft_model=draft, n_draft=n_draft)
    ids = [
        [e.id for e in session.stream_events(p, max_tokens=TOKENS, temp=0) if isinstance(e, TokenEvent)]
        for p in PROMPTS
    ]
    return ids, session.stats()


def _counters(stats: MTPStats) -> tuple[int, int, int]:
    return stats.drafts_generated, stats.drafts_accepted, stats.iters


def _replayed(path: Path, model: Model, n_draft: int) -> tuple[int, int, int]:
    spec = spec_of(path)
    assert spec is not None
    session = make_session(model, n_draft=0)
    runs = [expected_counters(spec.tokens(), session.tokenize_prompt(p)[-1], TOKENS, n_draft) for p in PROMPTS]
    return tuple(sum(r[k] for r in runs) for k in ("drafts_generated", "drafts_accepted", "iters"))  # type: ignore[return-value]


@pytest.mark.parametrize(("fmt", "head"), [("f16", "q8_0"), ("f16", "q4_0"), ("q8_0", "q8_0"), ("q8_0", "q4_0")])
def test_forced_model_with_a_quantized_head_accepts_every_draft(synth_dir: Path, fmt: str, head: str) -> None:
    path = synthetic_model(SIZE, None, fmt, synth_dir)
    sidecar = write_draft_head(path, synth_dir, head)
    model = Model.load(path)
    plain, _ = _generate(model, None, 0)
    ids, stats = _generate(model, Model.load(sidecar), 3)
    assert ids == plain
    assert stats.drafts_generated > 0 and stats.acceptance_rate == 1.0
    assert _counters(stats) == _replayed(path, model, 3)


@pytest.mark.parametrize("head", ["f16", "q8_0", "q4_0"])
def test_calibrated_model_keeps_the_acceptance_of_its_f16_head(synth_dir: Path, head: str) -> None:
    # Tolerance 0: the counters equal the f16 head's exactly. On a synthetic model the head's
    # draft is an argmax whose steered logit is 40 while every other logit is 40 times a random
    # cosine of two 128-dim vectors (at most ~0.45 over 4096 tokens), a margin of ~20 logits.
    # q4_0 rounds each weight with an error of ~0.08 of the weights' rms, independent across the
    # 128 terms of a dot product: ~0.08 * 40 / sqrt(128) = 0.3 logits per logit, and the block's
    # output (a few percent of the residual) moves its input less still. No draft can change, so
    # the accepted counts cannot either; a real model, with close logits, would move a little.
    path = synthetic_model(SIZE, 0.75, "f16", synth_dir)
    model = Model.load(path)
    plain, _ = _generate(model, None, 0)
    _, f16_head = _generate(model, None, 3)
    ids, stats = _generate(model, Model.load(write_draft_head(path, synth_dir, head)), 3)
    assert ids == plain
    assert _counters(stats) == _counters(f16_head) == _replayed(path, model, 3)
    assert 0 < stats.acceptance_rate < 1


@pytest.mark.parametrize("head", ["f16", "q8_0", "q4_0"])
def test_sidecar_holds_the_head_in_the_requested_type(synth_dir: Path, head: str) -> None:
    import gguf

    path = synthetic_model(SIZE, 0.75, "f16", synth_dir)
    sidecar = write_draft_head(path, synth_dir, head)
    assert sidecar == synth_dir / f"mtp-{path.stem}-{head}.gguf"
    spec = spec_of(path)
    assert spec is not None
    s = spec.shape
    reader = gguf.GGUFReader(str(sidecar))
    types = {t.name: t.tensor_type for t in reader.tensors}
    shapes = {t.name: tuple(int(d) for d in t.shape) for t in reader.tensors}
    want = gguf.GGMLQuantizationType[head.upper()]
    assert not any(n.startswith(f"blk.{i}.") for n in types for i in range(s.n_layer))  # no trunk
    assert "output.weight" not in types
    lm_head = f"blk.{s.n_layer}.nextn.shared_head_head.weight"
    assert shapes[lm_head] == (s.n_embd, s.n_vocab)  # ggml order: (n_embd, n_vocab)
    for name, shape in shapes.items():
        expected = want if len(shape) == 2 else gguf.GGMLQuantizationType.F32
        assert types[name] == expected, name
    assert {f"blk.{s.n_layer}.nextn.eh_proj.weight", f"blk.{s.n_layer}.nextn.embed_tokens.weight",
            f"blk.{s.n_layer}.ffn_down.weight", "token_embd.weight", "output_norm.weight"} <= set(types)
    fields = {f.name: f.contents() for f in reader.fields.values() if not f.name.startswith("tokenizer.")}
    assert fields["general.file_type"] == {"f16": 1, "q8_0": 7, "q4_0": 2}[head]
    assert fields["hy_v3.block_count"] == s.n_layer + 1 and fields["hy_v3.nextn_predict_layers"] == 1
    # The LM head is the model's output matrix, converted.
    source = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}["output.weight"]
    head_t = next(t for t in reader.tensors if t.name == lm_head)
    values = gguf.quants.dequantize(head_t.data, head_t.tensor_type)
    original = np.asarray(source.data, dtype=np.float32)
    err = np.sqrt(np.mean((values - original) ** 2)) / np.sqrt(np.mean(original**2))
    assert err < {"f16": 1e-3, "q8_0": 0.01, "q4_0": 0.2}[head]
    model = Model.load(sidecar)
    assert model.has_mtp_head and model.n_vocab == s.n_vocab


def test_target_loaded_without_its_head_drafts_with_the_sidecar(synth_dir: Path) -> None:
    path = synthetic_model(SIZE, None, "f16", synth_dir)
    model = Model.load(path, load_mtp=False)
    plain, _ = _generate(model, None, 0)
    ids, stats = _generate(model, Model.load(write_draft_head(path, synth_dir, "q4_0")), 2)
    assert ids == plain and stats.acceptance_rate == 1.0


def test_hybrid_qwen35_head(tiny_paths: dict[str, Path], tmp_path: Path) -> None:
    # Another architecture (f32 source, tied embeddings, recurrent trunk): the sidecar's LM head
    # is the token embedding matrix.
    import gguf

    sidecar = write_draft_head(tiny_paths["hybrid"], tmp_path, "q8_0")
    names = {t.name for t in gguf.GGUFReader(str(sidecar)).tensors}
    assert "blk.4.nextn.shared_head_head.weight" in names and "blk.0.attn_norm.weight" not in names
    model = Model.load(tiny_paths["hybrid"])
    plain, _ = _generate(model, None, 0)
    ids, stats = _generate(model, Model.load(sidecar), 2)
    assert ids == plain and stats.drafts_generated > 0


def test_requantizing_a_sidecar(tiny_paths: dict[str, Path], tmp_path: Path) -> None:
    sidecar = write_draft_head(tiny_paths["mtp-random-trunk"], tmp_path, "f16")
    assert sidecar.name == "mtp-random-trunk-f16.gguf"
    trunk = Model.load(tiny_paths["random-trunk"])
    plain, _ = _generate(trunk, None, 0)
    ids, _ = _generate(trunk, Model.load(sidecar), 2)
    assert ids == plain


def test_requantizing_a_draft_head_keeps_its_lm_head(synth_dir: Path, tmp_path: Path) -> None:
    import gguf

    path = synthetic_model(SIZE, None, "f16", synth_dir)
    again = write_draft_head(write_draft_head(path, tmp_path, "q8_0"), tmp_path, "q4_0")
    names = [t.name for t in gguf.GGUFReader(str(again)).tensors]
    assert names.count("blk.5.nextn.shared_head_head.weight") == 1 and "output.weight" not in names
    model = Model.load(path)
    ids, stats = _generate(model, Model.load(again), 3)
    assert ids == _generate(model, None, 0)[0] and stats.acceptance_rate == 1.0


def test_several_heads_share_one_lm_head(tiny_paths: dict[str, Path], tmp_path: Path) -> None:
    # Two hy_v3 heads: one copy of the LM head as output.weight (the graphs' fallback), not one per head.
    import gguf

    from mtp_llm.gguf.hyv3 import read_hy_v3, write_hy_v3

    config, tensors, vocab, _ = read_hy_v3(tiny_paths["random"])
    head = f"blk.{config.n_layer}."
    tensors.update({n.replace(head, f"blk.{config.n_layer + 1}."): t for n, t in list(tensors.items()) if n.startswith(head)})
    path = write_hy_v3(tmp_path / "two-heads.gguf", dataclasses.replace(config, n_nextn=2), tensors, vocab)
    sidecar = write_draft_head(path, tmp_path, "q8_0")
    names = [t.name for t in gguf.GGUFReader(str(sidecar)).tensors]
    assert "output.weight" in names and not [n for n in names if "shared_head_head" in n]
    model = Model.load(path)
    ids, _ = _generate(model, Model.load(sidecar), 2)
    assert ids == _generate(model, None, 0)[0]


def test_default_path_is_beside_the_model(tmp_path: Path) -> None:
    assert draft_head_path(tmp_path / "m.gguf", "q4_0") == tmp_path / "mtp-m-q4_0.gguf"
    assert draft_head_path(tmp_path / "mtp-m.gguf", "q8_0") == tmp_path / "mtp-m-q8_0.gguf"


def _headless(tiny_paths: dict[str, Path], out: Path) -> Path:
    """The tiny random model without its MTP head (none declared, none stored)."""
    from mtp_llm.gguf.hyv3 import read_hy_v3, write_hy_v3

    config, tensors, vocab, template = read_hy_v3(tiny_paths["random"])
    trunk = {n: t for n, t in tensors.items() if not n.startswith(f"blk.{config.n_layer}.")}
    return write_hy_v3(out, dataclasses.replace(config, n_nextn=0), trunk, vocab, chat_template=template)


@pytest.mark.parametrize(
    ("case", "error", "message"),
    [
        ("no head", MissingMTPHeadError, "has no MTP head"),
        ("trunk only", MissingMTPHeadError, "trunk-only"),
        ("no MTP graph", MissingMTPHeadError, "architecture 'glm4'"),
        ("not a GGUF", ModelLoadError, "as a GGUF file"),
        ("missing file", ModelLoadError, "as a GGUF file"),
        ("unknown type", InvalidOptionError, "one of f16, q8_0, q4_0"),
    ],
)
def test_bad_input_raises_a_clear_error(
    tiny_paths: dict[str, Path], tmp_path: Path, case: str, error: type[MTPError], message: str
) -> None:
    args: dict[str, Any] = {"file_type": "q8_0"}
    if case == "no head":
        path = _headless(tiny_paths, tmp_path / "headless.gguf")
    elif case == "trunk only":
        path = tiny_paths["random-trunk"]
    elif case == "no MTP graph":
        path = tiny_paths["glm4-nextn"]
    elif case == "not a GGUF":
        path = tmp_path / "text.gguf"
        path.write_text("not a model\n" * 10)
    elif case == "missing file":
        path = tmp_path / "absent.gguf"
    else:
        path, args["file_type"] = tiny_paths["random"], "q5_k"
    with pytest.raises(error, match=message):
        write_draft_head(path, tmp_path, **args)
    assert not list(tmp_path.glob("mtp-*")) and not list(tmp_path.glob(".*.tmp"))


def test_cli_writes_a_draft_head(tiny_paths: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mtp_llm.cli import main

    assert main(["draft-head", str(tiny_paths["random"]), "--type", "q4_0", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "mtp-random-q4_0.gguf").exists()
    assert "mtp-random-q4_0.gguf" in capsys.readouterr().out
    assert main(["draft-head", str(tiny_paths["glm4-nextn"]), "--out", str(tmp_path)]) == 2
    assert "glm4" in capsys.readouterr().err
