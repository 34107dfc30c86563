"""Bad input raises a specific MTPError subclass with a helpful message; the process never aborts.

Each case runs in a fresh subprocess, so an abort inside llama.cpp would fail
the case instead of killing the test runner.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

CASES: dict[str, tuple[str, str, str]] = {
    # name: (code using `paths`, `models` and helpers, expected class, message fragment)
    "missing file": ("Model.load(paths['dir'] / 'nope.gguf')", "ModelLoadError", "not found"),
    "context beyond memory": ("MTP(Model.load(paths['random']), n_ctx=2**31 - 1, n_threads=1)", "ModelLoadError",
                              "lower n_ctx"),
    "directory": ("Model.load(paths['dir'])", "ModelLoadError", "directory"),
    "empty file": ("Model.load(write(b''))", "ModelLoadError", "not a GGUF"),
    "not a gguf": ("Model.load(write(b'hello world, not a model'))", "ModelLoadError", "not a GGUF"),
    "random bytes after magic": ("Model.load(write(b'GGUF' + bytes(range(256)) * 4))", "ModelLoadError", "corrupt"),
    "truncated gguf": ("Model.load(write(paths['random'].read_bytes()[:5000]))", "ModelLoadError", "corrupt"),
    "trunk without sidecar": ("MTP(Model.load(paths['random-trunk']), draft_model=None, n_threads=1)", "MissingMTPHeadError", "draft_model"),
    "sidecar as target": ("MTP(Model.load(paths['mtp-random-trunk']), n_threads=1)", "ModelLoadError", "sidecar"),
    "load_mtp False": ("MTP(Model.load(paths['random'], load_mtp=False), n_threads=1)", "MissingMTPHeadError", "load_mtp"),
    "sidecar load_mtp False": (
        "MTP(Model.load(paths['random-trunk']), draft_model=Model.load(paths['mtp-random-trunk'], load_mtp=False), n_threads=1)",
        "MissingMTPHeadError", "load_mtp"),
    "sidecar other width": (
        "MTP(Model.load(paths['random-trunk']), draft_model=Model.load(paths['wide-sidecar']), n_threads=1)",
        "IncompatibleDraftError", "hidden size"),
    "sidecar other vocab": (
        "MTP(Model.load(paths['random-trunk']), draft_model=Model.load(paths['vocab-sidecar']), n_threads=1)",
        "IncompatibleDraftError", "vocabulary"),
    "architecture without MTP": ("MTP(Model.load(paths['glm4-plain']), n_threads=1)", "MissingMTPHeadError",
                                 "no MTP head"),
    "nextn tensors without MTP graph": ("MTP(Model.load(paths['glm4-nextn']), n_threads=1)", "MissingMTPHeadError",
                                        "no MTP draft graph"),
    "draft_model without MTP graph": (
        "MTP(Model.load(paths['random-trunk']), draft_model=Model.load(paths['glm4-nextn']), n_threads=1)",
        "MissingMTPHeadError", "no MTP draft graph"),
    "parity head without MTP graph": (
        "m = Model.load(paths['glm4-nextn']); mtp_llm._core.internals.forward_with_head(m._native, m._native, [1, 2])",
        "MissingMTPHeadError", "no MTP draft graph"),
    "vocabulary with a repeated token": ("Model.load(paths['repeated-token'])", "ModelLoadError", "same token twice"),
    "block_count out of range": ("Model.load(paths['huge-block-count'])", "ModelLoadError", "block_count"),
    "nextn heads beyond block_count": ("Model.load(paths['nextn-beyond-blocks'])", "ModelLoadError",
                                       "nextn_predict_layers"),
    "rope dimension unlike head size": ("Model.load(paths['rope-mismatch'])", "ModelLoadError",
                                        "rope.dimension_count"),
    "rope dimension beyond the head": ("Model.load(paths['rope-too-wide'])", "ModelLoadError", "rope.dimension_count"),
    "rope sections beyond the head": ("Model.load(paths['sections-too-wide'])", "ModelLoadError", "dimension_sections"),
    "negative norm epsilon": ("Model.load(paths['negative-eps'])", "ModelLoadError", "layer_norm_rms_epsilon"),
    "hybrid value heads unlike inner size": ("Model.load(paths['ssm-mismatch'])", "ModelLoadError", "ssm.inner_size"),
    "bias stored as f16": ("Model.load(paths['f16-bias'])", "ModelLoadError", "1-D tensor"),
    "architecture name not UTF-8": ("Model.load(paths['binary-architecture'])", "ModelLoadError", "could not load"),
    "two MTP heads where llama.cpp runs one": ("MTP(Model.load(paths['qwen35-two-heads']), n_threads=1)",
                                               "MissingMTPHeadError", "exactly one"),
    "n_draft negative": ("MTP(models['random'], n_draft=-1)", "InvalidOptionError", "n_draft"),
    "n_draft huge": ("MTP(models['random'], n_draft=10**6)", "InvalidOptionError", "n_draft"),
    "n_ctx tiny": ("MTP(models['random'], n_ctx=1)", "InvalidOptionError", "n_ctx"),
    "n_batch one, plain decoding": ("MTP(models['random'], n_draft=0, n_batch=1)", "InvalidOptionError", "n_batch"),
    "bad cache type": ("MTP(models['random'], type_k='q9')", "InvalidOptionError", "type_k"),
    "prompt beyond n_ctx": ("session(n_ctx=256).generate('x ' * 200, max_tokens=4)", "ContextOverflowError", "n_ctx"),
    "max_tokens beyond n_ctx": ("session(n_ctx=256).generate('Hi', max_tokens=300)", "ContextOverflowError", "max_tokens"),
    "empty prompt": ("session().generate('')", "InvalidPromptError", "empty"),
    "empty token list": ("session().generate([])", "InvalidPromptError", "empty"),
    "token out of vocabulary": ("session().generate([10**6])", "InvalidPromptError", "vocabulary"),
    "invalid utf-8 bytes": ("session().generate(b'\\xff\\xfe')", "InvalidPromptError", "UTF-8"),
    "unparsable grammar": ("session().generate('Hi', grammar='root ::= (')", "GrammarError", "grammar"),
    "grammar without root": ("session().generate('Hi', grammar='foo ::= \"a\"')", "GrammarError", "grammar"),
    "negative temperature": ("session().generate('Hi', temp=-1.0)", "InvalidOptionError", "temp"),
    "nan temperature": ("session().generate('Hi', temp=float('nan'))", "InvalidOptionError", "NaN"),
    "top_p above 1": ("session().generate('Hi', top_p=1.5)", "InvalidOptionError", "top_p"),
    "top_p negative": ("session().generate('Hi', top_p=-0.1)", "InvalidOptionError", "top_p"),
    "max_tokens zero": ("session().generate('Hi', max_tokens=0)", "InvalidOptionError", "max_tokens"),
    "max_tokens negative": ("session().generate('Hi', max_tokens=-5)", "InvalidOptionError", "max_tokens"),
    "empty stop string": ("session().generate('Hi', stop=[''])", "InvalidOptionError", "stop"),
    "huge stop string": ("session().generate('Hi', stop=['x' * 5000])", "InvalidOptionError", "stop"),
    "timeout zero": ("session().generate('Hi', timeout=0)", "InvalidOptionError", "timeout"),
    "unknown option": ("session().generate('Hi', temperature=0.5)", "InvalidOptionError", "unknown"),
    "per-call n_draft above session": ("session().generate('Hi', n_draft=9)", "InvalidOptionError", "n_draft"),
    "wrong option type": ("session().generate('Hi', max_tokens='ten')", "InvalidOptionError", "integer"),
    "repeat penalty zero": ("session().generate('Hi', repeat_penalty=0.0)", "InvalidOptionError", "repeat_penalty"),
    "chat template missing": ("models['random'].apply_chat_template([{'role': 'user', 'content': 'hi'}])",
                              "InvalidOptionError", "chat template"),
}

RUNNER = textwrap.dedent(
    """
    import json, sys, tempfile
    from pathlib import Path
    import mtp_llm
    from mtp_llm import MTP, Model
    paths = {k: Path(v) for k, v in json.loads(sys.argv[1]).items()}
    models = {'random': Model.load(paths['random'])}
    def write(data):
        f = tempfile.NamedTemporaryFile(suffix='.gguf', delete=False, dir=paths['dir']); f.write(data); f.close(); return f.name
    def session(**kw):
        kw.setdefault('n_threads', 1); kw.setdefault('n_ctx', 1024)
        return MTP(models['random'], **kw)
    try:
        exec(sys.argv[2])
    except mtp_llm.MTPError as exc:
        print(json.dumps({'class': type(exc).__name__, 'message': str(exc)}))
    else:
        print(json.dumps({'class': None, 'message': ''}))
    """
)


@pytest.fixture(scope="module")
def case_paths(tiny_paths, tmp_path_factory) -> dict[str, str]:
    import dataclasses

    from mtp_llm.gguf.common import tiny_vocab
    from tests.helpers.gguf_fuzz import overwrite_field, overwrite_tensor_type
    from mtp_llm.gguf.glm4 import write_glm4
    from mtp_llm.gguf.hyv3 import read_hy_v3, write_hy_v3
    from mtp_llm.gguf.qwen35 import Qwen35Config, random_qwen35_tensors, write_qwen35_tensors
    from mtp_llm.gguf.tiny_models import _random_tensors

    out = tmp_path_factory.mktemp("bad")
    config, _, vocab, _ = read_hy_v3(tiny_paths["random"])
    wide = dataclasses.replace(config, n_embd=96, n_ff=128)
    write_hy_v3(out / "wide.gguf", wide, _random_tensors(wide, 1), vocab, part="mtp")
    small_vocab = dataclasses.replace(
        tiny_vocab(), tokens=list(vocab.tokens) + ["<|extra|>"], token_types=list(vocab.token_types) + [3]
    )
    narrow = dataclasses.replace(config, n_vocab=len(small_vocab.tokens))
    write_hy_v3(out / "vocab.gguf", narrow, _random_tensors(narrow, 1), small_vocab, part="mtp")
    write_glm4(out / "glm4-plain.gguf", vocab, seed=5, n_nextn=0)
    repeated = dataclasses.replace(vocab, tokens=[*vocab.tokens[:66], vocab.tokens[65], *vocab.tokens[67:]])
    write_hy_v3(out / "repeated-token.gguf", config, _random_tensors(config, 1), repeated)
    two_heads = Qwen35Config(n_vocab=len(vocab.tokens), n_nextn=2)
    write_qwen35_tensors(out / "qwen35-two-heads.gguf", two_heads, random_qwen35_tensors(two_heads, 3), vocab)
    random = tiny_paths["random"]
    paths = {k: str(v) for k, v in tiny_paths.items()}
    paths.update({
        "repeated-token": str(out / "repeated-token.gguf"),
        # 4 elements: f16 or f32, the padded size is the same, so only the type changes.
        "f16-bias": overwrite_tensor_type(tiny_paths["hybrid"], out / "f16-bias.gguf", "blk.0.ssm_dt.bias", 1),
        "qwen35-two-heads": str(out / "qwen35-two-heads.gguf"),
        "huge-block-count": overwrite_field(random, out / "blocks.gguf", "hy_v3.block_count", 100_000),
        "nextn-beyond-blocks": overwrite_field(random, out / "nextn.gguf", "hy_v3.nextn_predict_layers", 9),
        "rope-mismatch": overwrite_field(random, out / "rope.gguf", "hy_v3.rope.dimension_count", 8),
        "ssm-mismatch": overwrite_field(tiny_paths["hybrid"], out / "ssm.gguf", "qwen35.ssm.inner_size", 31),
        "rope-too-wide": overwrite_field(tiny_paths["hybrid"], out / "rope-wide.gguf", "qwen35.rope.dimension_count", 32),
        "sections-too-wide": overwrite_field(
            tiny_paths["hybrid"], out / "sections.gguf", "qwen35.rope.dimension_sections", 12
        ),
        "negative-eps": overwrite_field(tiny_paths["hybrid"], out / "eps.gguf", "qwen35.attention.layer_norm_rms_epsilon", -1.0),
        "binary-architecture": overwrite_field(random, out / "arch.gguf", "general.architecture", b"\xffy_v3"),
    })
    paths.update({"dir": str(out), "wide-sidecar": str(out / "wide.gguf"), "vocab-sidecar": str(out / "vocab.gguf"),
                  "glm4-plain": str(out / "glm4-plain.gguf")})
    return {name: str(path) for name, path in paths.items()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_raises_specific_error(name: str, case_paths: dict[str, str]) -> None:
    code, expected_class, fragment = CASES[name]
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(case_paths), code],
        capture_output=True, text=True, timeout=120, cwd=Path(__file__).parent,
    )
    assert proc.returncode == 0, f"process died (rc={proc.returncode}): {proc.stderr[-2000:]}"
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["class"] == expected_class, result
    assert fragment.lower() in result["message"].lower(), result["message"]


def test_at_least_25_cases() -> None:
    assert len(CASES) >= 25


MUTATION_RUNNER = textwrap.dedent(
    """
    import sys
    import mtp_llm
    from mtp_llm import MTP, Model
    for i, path in enumerate(sys.argv[1:]):
        print(i, flush=True)
        try:
            model = Model.load(path)
            (model.architecture, model.description, model.chat_template)
            MTP(model, n_draft=2, n_threads=1, n_ctx=256).generate("Hello", max_tokens=4, temp=0)
        except mtp_llm.MTPError as exc:
            str(exc)
    print("done", flush=True)
    """
)


def assert_every_mutant_survives(paths: list[Path]) -> None:
    """Runs MUTATION_RUNNER over the mutants in one child process: each loads and generates or raises an MTPError."""
    proc = subprocess.run(
        [sys.executable, "-c", MUTATION_RUNNER, *map(str, paths)], capture_output=True, text=True, timeout=300,
    )
    lines = proc.stdout.split()
    assert proc.returncode == 0 and lines[-1] == "done", (
        f"mutant {lines[-1] if lines else '?'} killed the process (rc={proc.returncode}): {proc.stderr[-1500:]}"
    )


@pytest.mark.parametrize("model_name", ["random", "hybrid", "glm4-nextn", "llama-mtp", "glm4moe"])
def test_mutated_gguf_files_never_abort(model_name: str, tiny_paths, tmp_path: Path) -> None:
    """Loading a GGUF is loading untrusted input: structure-aware mutations of a real file
    (150, fixed seed) each load and generate, or raise an MTPError; none takes the process down."""
    from tests.helpers.gguf_fuzz import mutate_gguf

    paths = mutate_gguf(tiny_paths[model_name], tmp_path, count=150, seed=2026)
    assert_every_mutant_survives(paths)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("qwen35.rope.dimension_count", 0, "rope.dimension_count"),
        ("qwen35.full_attention_interval", 0, "full_attention_interval"),
        ("qwen35.rope.dimension_sections", 0, "dimension_sections"),
    ],
)
def test_hybrid_hyperparameters_the_metadata_fuzz_found(tiny_paths, tmp_path, key: str, value: int, message: str) -> None:
    """Well-typed values that killed (SIGFPE, a ggml assert) or hung the process before a check
    caught them (tools/fuzz_gguf.py --metadata): each is now a ModelLoadError naming the key."""
    import gguf

    from mtp_llm import Model, ModelLoadError
    from tests.helpers.gguf_fuzz import overwrite_field

    src = tiny_paths["hybrid"]
    path = tmp_path / "mutant.gguf"
    if key.endswith("dimension_sections"):  # every section zero
        data = bytearray(src.read_bytes())
        reader = gguf.GGUFReader(src)
        field = reader.fields[key]
        for i in field.data:
            part = field.parts[i]
            offset = int(part.__array_interface__["data"][0] - reader.data.__array_interface__["data"][0])
            data[offset : offset + part.nbytes] = bytes(part.nbytes)
        path.write_bytes(bytes(data))
    else:
        overwrite_field(src, path, key, value)
    with pytest.raises(ModelLoadError, match=message):
        Model.load(path)


@pytest.mark.parametrize("model_name", ["random", "hybrid", "llama-mtp-v96", "glm4moe"])
def test_metadata_mutants_of_every_mtp_layout_never_abort(model_name: str, tiny_paths, tmp_path: Path) -> None:
    """Well-typed edge values of the hyperparameters (tools/fuzz_gguf.py --metadata, a 100-mutant
    sample of each MTP layout: hy_v3, qwen35, the built-in model's llama + trimmed nextn head,
    glm4moe) each load and generate, or raise an MTPError."""
    from mtp_llm.gguf.draft_vocab import trim_embedded_head
    from tests.helpers.gguf_fuzz import mutate_metadata

    if model_name == "llama-mtp-v96":
        src = trim_embedded_head(tiny_paths["llama-mtp"], tmp_path / "llama-mtp-v96.gguf", np.arange(0, 192, 2))
    else:
        src = tiny_paths[model_name]
    paths = mutate_metadata(src, tmp_path, count=100, seed=2027)
    assert_every_mutant_survives(paths)


@pytest.mark.parametrize("value", [5, 7, 65536, 2**32 - 1])
def test_an_unknown_expert_gating_function_is_a_load_error(value: int, tiny_paths, tmp_path: Path) -> None:
    """llama.cpp's MoE graph builder aborts on a gating function it does not know (found by the
    metadata fuzz on glm4moe): a ModelLoadError naming the key instead."""
    from mtp_llm import Model, ModelLoadError
    from tests.helpers.gguf_fuzz import overwrite_field

    path = overwrite_field(tiny_paths["glm4moe"], tmp_path / "mutant.gguf", "glm4moe.expert_gating_func", value)
    with pytest.raises(ModelLoadError, match="expert_gating_func"):
        Model.load(path)


def _write_olmo2(path: Path, swa_pattern: list[bool]) -> Path:
    """A tiny random olmo2 (sliding-window attention on: sliding_window 16, the given per-layer pattern)."""
    import gguf

    from mtp_llm.gguf.common import add_bpe_vocab, finish_file, tiny_vocab
    from mtp_llm.gguf.mtp_layouts import RandomTensors

    vocab, n_embd, n_ff = tiny_vocab(), 64, 128
    t = RandomTensors(9, len(vocab.tokens), n_embd, 4, 4, 16)
    t.all["output.weight"] = t.random(len(vocab.tokens), n_embd)
    for i in range(len(swa_pattern)):
        t.attention(i)
        t.dense_ffn(i, n_ff)
        del t.all[f"blk.{i}.attn_norm.weight"]
        for name in ("attn_q_norm", "attn_k_norm", "post_attention_norm", "post_ffw_norm"):
            t.all[f"blk.{i}.{name}.weight"] = t.ones
    writer = gguf.GGUFWriter(str(path), "olmo2")
    writer.add_context_length(256)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(len(swa_pattern))
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(4)
    writer.add_head_count_kv(4)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_sliding_window(16)
    writer.add_array("olmo2.attention.sliding_window_pattern", swa_pattern)
    add_bpe_vocab(writer, vocab)
    for name, array in t.all.items():
        writer.add_tensor(name, array)
    finish_file(writer)
    return path


def test_a_sliding_window_pattern_that_marks_no_layer_is_a_load_error(tmp_path: Path) -> None:
    """Found by fuzzing GGUF metadata (on mimo2): an architecture with sliding-window attention whose
    pattern marks no layer loaded, and making a context aborted the process in
    llama_model::create_memory (GGML_ASSERT(hparams.is_swa_any())). Now a ModelLoadError at load;
    the same model with one sliding-window layer generates."""
    code = textwrap.dedent(
        """
        import sys, mtp_llm
        try:
            model = mtp_llm.Model.load(sys.argv[1])
            mtp_llm.MTP(model, n_draft=0, n_threads=1, n_ctx=256).generate("Hello", max_tokens=4, temp=0)
            print("ok")
        except mtp_llm.MTPError as exc:
            print(type(exc).__name__, exc)
        """
    )
    none = _write_olmo2(tmp_path / "none.gguf", [False, False])
    some = _write_olmo2(tmp_path / "some.gguf", [True, False])
    runs = [subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True, timeout=120)
            for p in (none, some)]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr[-1500:]
    assert runs[0].stdout.startswith("ModelLoadError") and "sliding_window_pattern marks no layer" in runs[0].stdout
    assert runs[1].stdout.strip() == "ok", runs[1].stdout
