"""Model loading, metadata, tokenizer, chat template, embeddings, and the GGUF writer/splitter."""

from __future__ import annotations

import numpy as np
import pytest

from mtp_llm import MTP, MTP_ARCHITECTURES, InvalidOptionError, Model, TokenEvent, _core
from mtp_llm.gguf.common import tiny_vocab
from mtp_llm.gguf.hyv3 import read_hy_v3, split_mtp
from mtp_llm.gguf.tiny_models import TINY_CONFIG

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_model_properties(random_model: Model) -> None:
    assert random_model.architecture == "hy_v3"
    assert random_model.n_vocab == len(tiny_vocab().tokens)
    assert random_model.n_embd == TINY_CONFIG.n_embd
    assert random_model.n_layer == TINY_CONFIG.n_layer  # trunk blocks; the head is extra
    assert random_model.n_mtp_heads == 1 and random_model.has_mtp_head
    assert random_model.n_ctx_train == TINY_CONFIG.n_ctx_train
    assert random_model.chat_template is None
    assert random_model.token_eos == tiny_vocab().eos_id and random_model.is_eog(random_model.token_eos)


def test_trunk_and_sidecar_flags(tiny_paths) -> None:
    trunk = Model.load(tiny_paths["random-trunk"])
    sidecar = Model.load(tiny_paths["mtp-random-trunk"])
    assert trunk.n_mtp_heads == 1 and not trunk.has_mtp_head and not trunk.is_mtp_sidecar
    assert sidecar.has_mtp_head and sidecar.is_mtp_sidecar


def test_nextn_tensors_without_mtp_graph_decode_plainly(tiny_paths) -> None:
    glm4 = Model.load(tiny_paths["glm4-nextn"])
    assert glm4.architecture == "glm4" and glm4.architecture not in MTP_ARCHITECTURES
    assert glm4.n_mtp_heads == 1 and glm4.has_mtp_head and not glm4.has_mtp_graph
    session = MTP(glm4, n_draft=0, n_threads=1)
    first = [e.id for e in session.stream_events("Hello", max_tokens=12, temp=0)
             if isinstance(e, TokenEvent)]
    assert len(first) == 12
    assert session.stats().drafts_generated == 0
    again = [e.id for e in session.stream_events("Hello", max_tokens=12, temp=0)
             if isinstance(e, TokenEvent)]
    assert again == first


def _mtp_graph_architectures_in_llama_cpp_source(single_head: bool = False) -> set[str]:
    """Architectures whose graph builder handles LLM_GRAPH_TYPE_DECODER_MTP, read from the llama.cpp
    sources; with ``single_head``, those whose MTP graph asserts exactly one nextn layer."""
    import os
    import re
    import sys
    from pathlib import Path

    root = os.environ.get("MTP_LLM_LLAMA_CPP_DIR")
    if not root:
        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cmake"))
        from fetch_llama_cpp import default_cache_dir, ensure_llama_cpp

        root = str(ensure_llama_cpp(default_cache_dir()))
    src = Path(root) / "src"
    graph_builder = re.compile(r"llama_model_(\w+)::build_arch_graph\([^)]*\)\s*const\s*\{(.*?)\n\}", re.DOTALL)
    classes = set()
    for source in (src / "models").glob("*.cpp"):
        for m in graph_builder.finditer(source.read_text()):
            if "LLM_GRAPH_TYPE_DECODER_MTP" in m.group(2) and (
                not single_head or "n_layer_nextn == 1" in source.read_text()
            ):
                classes.add(m.group(1))
    model_factory = re.compile(r"((?:case\s+LLM_ARCH_\w+:\s*)+)return new llama_model_(\w+)\(")
    arch_ids = set()
    for m in model_factory.finditer((src / "llama-model.cpp").read_text()):
        if m.group(2) in classes:
            arch_ids.update(re.findall(r"LLM_ARCH_(\w+)", m.group(1)))
    names = dict(re.findall(r"\{\s*LLM_ARCH_(\w+),\s*\"([^\"]+)\"\s*\}", (src / "llama-arch.cpp").read_text()))
    return {names[a] for a in arch_ids}


def test_mtp_architectures_match_llama_cpp_source() -> None:
    found = _mtp_graph_architectures_in_llama_cpp_source()
    assert len(found) >= 10 and "hy_v3" in found and "qwen35" in found
    assert set(MTP_ARCHITECTURES) == found
    single = _mtp_graph_architectures_in_llama_cpp_source(single_head=True)
    assert "qwen35" in single and "hy_v3" not in single
    assert set(_core.single_head_mtp_architectures()) == single


@pytest.mark.parametrize("text", ["Hello world", "the theory", "ünïcödé €", "a\nb\tc  d"])
def test_tokenize_round_trip(random_model: Model, text: str) -> None:
    tokens = random_model.tokenize(text)
    assert random_model.detokenize(tokens) == text


def test_merges_are_used(random_model: Model) -> None:
    # "Ġt"+"he" -> "Ġthe" is merge 3 of the tiny vocabulary.
    assert random_model.tokenize(" the") == [tiny_vocab().tokens.index("Ġthe")]


def test_chat_template_override(random_model: Model) -> None:
    prompt = random_model.apply_chat_template([{"role": "user", "content": "hi"}], chat_template=CHATML)
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    with pytest.raises(InvalidOptionError, match="chat template"):
        random_model.apply_chat_template([("user", "hi")])


def test_embeddings_are_normalised_and_deterministic(random_model: Model) -> None:
    a, b, a2 = random_model.embed(["hello there", "something else entirely", "hello there"], n_threads=1)
    assert len(a) == random_model.n_embd
    assert np.isclose(np.linalg.norm(a), 1.0, atol=1e-5)
    assert np.allclose(a, a2)
    assert not np.allclose(a, b)


def test_split_round_trip(tiny_paths, tmp_path) -> None:
    trunk, sidecar = split_mtp(tiny_paths["random"], tmp_path)
    config, tensors, _, _ = read_hy_v3(tiny_paths["random"])
    _, trunk_tensors, _, _ = read_hy_v3(trunk)
    _, head_tensors, _, _ = read_hy_v3(sidecar)
    assert set(trunk_tensors) | set(head_tensors) == set(tensors)
    assert set(trunk_tensors) & set(head_tensors) == {"token_embd.weight", "output_norm.weight"}
    head = config.n_layer
    assert np.array_equal(head_tensors[f"blk.{head}.nextn.eh_proj.weight"], tensors[f"blk.{head}.nextn.eh_proj.weight"])


def test_quantized_q8_0_model_runs_and_stays_lossless(tmp_path) -> None:
    """Quantized matmuls take other CPU kernels (AMX ones once killed the process with SIGILL
    on machines that report AMX without enabling it); run in a subprocess to catch any abort."""
    import subprocess
    import sys
    import textwrap

    from mtp_llm.gguf.hyv3 import write_hy_v3
    from mtp_llm.gguf.tiny_models import TINY_CONFIG, _random_tensors

    path = tmp_path / "q8.gguf"
    write_hy_v3(path, TINY_CONFIG, _random_tensors(TINY_CONFIG, 1234), tiny_vocab(), file_type="q8_0")
    code = textwrap.dedent(
        f"""
        from mtp_llm import MTP, Model
        m = Model.load({str(path)!r})
        plain = MTP(m, n_draft=0, n_threads=1, n_ctx=256).generate("Hello", max_tokens=32, temp=0)
        spec = MTP(m, n_draft=3, n_threads=1, n_ctx=256).generate("Hello", max_tokens=32, temp=0)
        print(plain == spec)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"rc={proc.returncode}: {proc.stderr[-1500:]}"
    assert proc.stdout.strip() == "True"
