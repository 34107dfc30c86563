"""Files written by llama.cpp's own converter: a tiny random Qwen3.5 checkpoint in the Hub's layout,
converted by the pinned tree's ``convert_hf_to_gguf.py`` three ways (embedded head, ``--no-mtp`` trunk,
``--mtp`` sidecar), decodes with MTP exactly as without, and ``draft_model="auto"`` finds the
converter's sidecar by its name and metadata.

The converter runs in its own environment (``.venv-convert``: torch and transformers, made by
``scripts/setup.sh``), so its pins never touch the package's. Its tokenizer check hashes the token ids
of a fixed text, so the checkpoint carries GPT-2's vocabulary (from the tree's ``models/ggml-vocab-gpt-2.gguf``).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mtp_llm import MTP, AmbiguousDraftError, IncompatibleDraftError, Model, TokenEvent
from mtp_llm.sidecars import sidecar_names

REPO = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())  # wherever tests/ nests it
THREADS = int(os.environ.get("MTP_LLM_TEST_THREADS", "1"))
CONVERT_PYTHON = Path(os.environ.get("MTP_LLM_CONVERT_VENV", REPO / ".venv-convert")) / "bin" / "python"

# A Qwen3.5 text config in the Hub's shape, shrunk: 4 blocks (Gated DeltaNet, attention, ...), one MTP block.
TEXT_CONFIG: dict[str, Any] = {
    "model_type": "qwen3_5_text",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "layer_types": ["linear_attention", "full_attention", "linear_attention", "full_attention"],
    "full_attention_interval": 2,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "mtp_num_hidden_layers": 1,
    "mtp_use_dedicated_embeddings": False,
    "attn_output_gate": True,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 10000000.0,
        "partial_rotary_factor": 0.25,
        "mrope_section": [2, 1, 1],
        "mrope_interleaved": True,
    },
    "bos_token_id": 50256,
    "eos_token_id": 50256,
    "vocab_size": 50257,
}


# ---------------------------------------------------------------------------- the checkpoint


def _gguf_string_arrays(path: Path, keys: set[str]) -> dict[str, list[str]]:
    """The string arrays ``keys`` of a GGUF header (a plain walk: gguf.GGUFReader takes seconds on 100k strings)."""
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    data = path.read_bytes()
    n_kv = struct.unpack_from("<Q", data, 16)[0]
    pos, out = 24, {}

    def string(at: int) -> tuple[str, int]:
        n = struct.unpack_from("<Q", data, at)[0]
        return data[at + 8 : at + 8 + n].decode(), at + 8 + n

    for _ in range(n_kv):
        key, pos = string(pos)
        kind = struct.unpack_from("<I", data, pos)[0]
        pos += 4
        if kind == 8:
            _, pos = string(pos)
        elif kind == 9:
            item, n = struct.unpack_from("<IQ", data, pos)
            pos += 12
            if item == 8:
                items = []
                for _ in range(n):
                    text, pos = string(pos)
                    items.append(text)
                if key in keys:
                    out[key] = items
            else:
                pos += sizes[item] * n
        else:
            pos += sizes[kind]
    return out


def _write_tokenizer(directory: Path, vocab_gguf: Path) -> None:
    """GPT-2's byte-level BPE as a ``tokenizer.json`` (the converter recognises its pre-tokenizer by hash)."""
    arrays = _gguf_string_arrays(vocab_gguf, {"tokenizer.ggml.tokens", "tokenizer.ggml.merges"})
    tokens, merges = arrays["tokenizer.ggml.tokens"], arrays["tokenizer.ggml.merges"]
    eos = "<|endoftext|>"
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": tokens.index(eos), "content": eos, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": True, "special": True}
        ],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges},
    }
    (directory / "tokenizer.json").write_text(json.dumps(tokenizer))
    config = {"tokenizer_class": "GPT2Tokenizer", "bos_token": eos, "eos_token": eos, "unk_token": eos}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))


def _hf_tensors(seed: int) -> dict[str, np.ndarray]:
    """Random weights under the Hub's Qwen3.5 tensor names (``model.language_model.*``, ``mtp.*``).

    The output head is the embedding turned by a rotation and every block's output is small, so the
    trunk mostly emits a fixed successor of the current token; the MTP block is that successor map
    exactly (its attention and FFN add nothing), so its drafts are right part of the time."""
    c = TEXT_CONFIG
    e, ff, vocab = int(c["hidden_size"]), int(c["intermediate_size"]), int(c["vocab_size"])
    hd, nh, nkv = int(c["head_dim"]), int(c["num_attention_heads"]), int(c["num_key_value_heads"])
    kd, vd = int(c["linear_key_head_dim"]), int(c["linear_value_head_dim"])
    nk, nv = int(c["linear_num_key_heads"]), int(c["linear_num_value_heads"])
    conv = 2 * kd * nk + vd * nv
    rng = np.random.default_rng(seed)
    small = 0.05

    def dense(rows: int, cols: int, scale: float = 1.0) -> np.ndarray:
        return rng.standard_normal((rows, cols)) * scale / np.sqrt(cols)

    def norm(n: int) -> np.ndarray:  # Qwen3.5 norms are stored as (weight - 1)
        return 0.1 * rng.standard_normal(n)

    def mlp(prefix: str, scale: float) -> dict[str, np.ndarray]:
        return {
            f"{prefix}.mlp.gate_proj.weight": dense(ff, e),
            f"{prefix}.mlp.up_proj.weight": dense(ff, e),
            f"{prefix}.mlp.down_proj.weight": dense(e, ff, scale),
            f"{prefix}.input_layernorm.weight": norm(e),
            f"{prefix}.post_attention_layernorm.weight": norm(e),
        }

    def attention(prefix: str, scale: float) -> dict[str, np.ndarray]:
        return {
            f"{prefix}.self_attn.q_proj.weight": dense(2 * nh * hd, e),  # query and output gate
            f"{prefix}.self_attn.k_proj.weight": dense(nkv * hd, e),
            f"{prefix}.self_attn.v_proj.weight": dense(nkv * hd, e),
            f"{prefix}.self_attn.o_proj.weight": dense(e, nh * hd, scale),
            f"{prefix}.self_attn.q_norm.weight": norm(hd),
            f"{prefix}.self_attn.k_norm.weight": norm(hd),
            **mlp(prefix, scale),
        }

    def delta_net(prefix: str) -> dict[str, np.ndarray]:
        return {
            f"{prefix}.linear_attn.in_proj_qkv.weight": dense(conv, e),
            f"{prefix}.linear_attn.in_proj_z.weight": dense(vd * nv, e),
            f"{prefix}.linear_attn.in_proj_b.weight": dense(nv, e),
            f"{prefix}.linear_attn.in_proj_a.weight": dense(nv, e),
            f"{prefix}.linear_attn.conv1d.weight": rng.standard_normal((conv, 1, int(c["linear_conv_kernel_dim"]))) * 0.5,
            f"{prefix}.linear_attn.dt_bias": 0.5 * rng.standard_normal(nv),
            f"{prefix}.linear_attn.A_log": rng.uniform(-1.0, 0.5, nv),
            f"{prefix}.linear_attn.norm.weight": 1.0 + 0.1 * rng.standard_normal(vd),
            f"{prefix}.linear_attn.out_proj.weight": dense(e, vd * nv, small),
            **mlp(prefix, small),
        }

    embed = rng.standard_normal((vocab, e))
    rotation, _ = np.linalg.qr(rng.standard_normal((e, e)))
    tensors: dict[str, np.ndarray] = {
        "model.language_model.embed_tokens.weight": embed,
        "model.language_model.norm.weight": np.zeros(e),
        "lm_head.weight": embed @ rotation,
    }
    for i, kind in enumerate(c["layer_types"]):
        prefix = f"model.language_model.layers.{i}"
        tensors |= delta_net(prefix) if kind == "linear_attention" else attention(prefix, small)
    head = attention("mtp.layers.0", 0.0)
    head = {k: np.zeros_like(v) if k.endswith("norm.weight") else v for k, v in head.items()}
    fc = np.zeros((e, 2 * e))
    fc[:, :e] = np.eye(e)  # [embedding, hidden] -> the normalised embedding of the given token
    tensors |= head | {
        "mtp.fc.weight": fc,
        "mtp.pre_fc_norm_embedding.weight": np.zeros(e),
        "mtp.pre_fc_norm_hidden.weight": np.zeros(e),
        "mtp.norm.weight": np.zeros(e),
    }
    tensors["model.visual.patch_embed.proj.weight"] = rng.standard_normal((8, 3, 2, 2))  # the converter drops it
    return tensors


def _write_safetensors(path: Path, tensors: Mapping[str, np.ndarray]) -> None:
    """``tensors`` as bf16 safetensors (the Hub's Qwen3.5 dtype): the upper halves of the f32 values."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    blobs, offset = [], 0
    for name, value in tensors.items():
        bits = (np.ascontiguousarray(value, dtype=np.float32).view(np.uint32) >> 16).astype("<u2")
        blob = bits.tobytes()
        header[name] = {"dtype": "BF16", "shape": list(value.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for blob in blobs:
            f.write(blob)


def write_hf_qwen35(directory: Path, vocab_gguf: Path, seed: int = 0) -> Path:
    """A tiny random Qwen3.5 checkpoint as the Hub lays it out: ``config.json`` with ``text_config``,
    ``model.safetensors``, ``tokenizer.json``."""
    directory.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": TEXT_CONFIG,
        "vision_config": {"model_type": "qwen3_5", "depth": 1, "hidden_size": 8},
        "tie_word_embeddings": False,
    }
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    _write_safetensors(directory / "model.safetensors", _hf_tensors(seed))
    _write_tokenizer(directory, vocab_gguf)
    return directory


# ---------------------------------------------------------------------------- the converter


def _llama_cpp_tree() -> Path:
    """The llama.cpp tree the extension was built from (as CMakeLists.txt finds it)."""
    root = os.environ.get("MTP_LLM_LLAMA_CPP_DIR")
    if root:
        return Path(root)
    sys.path.insert(0, str(REPO / "cmake"))
    try:
        from fetch_llama_cpp import default_cache_dir, ensure_llama_cpp
    finally:
        sys.path.pop(0)
    return Path(ensure_llama_cpp(default_cache_dir()))


TRUNK = "Qwen3.5-6.6M-F32.gguf"  # the converter's default names: <name>-<size label>-<type>
HEAD = "mtp-Qwen3.5-F32.gguf"  # --mtp: "mtp-", and no size label


# Runs the converter's main() once per set of flags, each in a child forked after the imports (torch,
# transformers, the converter): the runs stay as separate as three processes, the imports are paid once.
_DRIVER = r"""
import os, sys, traceback
tree, checkpoint, *runs = sys.argv[1:]
sys.path.insert(0, tree)
sys.argv = ["convert_hf_to_gguf.py"]
import convert_hf_to_gguf
from transformers import AutoTokenizer
children = []
for run in runs:
    log, *flags = run.split("|")
    pid = os.fork()
    if pid == 0:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        sys.argv = ["convert_hf_to_gguf.py", checkpoint, *flags]
        code = 0
        try:
            convert_hf_to_gguf.main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    children.append(pid)
sys.exit(max(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children))
"""


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The checkpoint converted three ways by the pinned converter: ``embedded`` (no flag: trunk and
    head in one file), ``trunk`` (``--no-mtp``) and ``head`` (``--mtp``), default file names."""
    assert CONVERT_PYTHON.is_file(), f"{CONVERT_PYTHON} is missing: run bash scripts/setup.sh (it makes .venv-convert)"
    tree = _llama_cpp_tree()
    root = tmp_path_factory.mktemp("converter")
    checkpoint = write_hf_qwen35(root / "Qwen3.5", tree / "models" / "ggml-vocab-gpt-2.gguf")
    (root / "embedded").mkdir()
    (root / "split").mkdir()
    runs = {"embedded": ["embedded"], "no-mtp": ["split", "--no-mtp"], "mtp": ["split", "--mtp"]}
    specs = ["|".join([str(root / f"{kind}.log"), "--outtype", "f32", "--outfile", str(root / out), *flags])
             for kind, (out, *flags) in runs.items()]
    done = subprocess.run([str(CONVERT_PYTHON), "-c", _DRIVER, str(tree), str(checkpoint), *specs],
                          capture_output=True, text=True, timeout=300)
    logs = "\n".join(f"--- {kind}:\n" + _tail(root / f"{kind}.log") for kind in runs)
    assert done.returncode == 0, f"convert_hf_to_gguf.py failed ({done.stderr[-2000:]}):\n{logs}"
    return {"embedded": root / "embedded" / TRUNK, "trunk": root / "split" / TRUNK, "head": root / "split" / HEAD}


def _tail(path: Path) -> str:
    return path.read_text()[-2000:] if path.exists() else "(no log)"


def _greedy(model: Model, draft: Model | None | str = "auto", n_draft: int = 3) -> tuple[list[int], MTP]:
    session = MTP(model, draft_model=draft, n_draft=n_draft, n_ctx=256, n_threads=THREADS)
    events = session.stream_events("The quick brown fox jumps over the lazy dog", max_tokens=40, temp=0)
    return [e.id for e in events if isinstance(e, TokenEvent)], session


def _folder(tmp_path: Path, files: Mapping[str, Path]) -> dict[str, Path]:
    """``files`` hard-linked into ``tmp_path`` under new names (as ``--outfile NAME.gguf`` writes them)."""
    out = {}
    for name, source in files.items():
        try:
            os.link(source, tmp_path / name)
        except OSError:  # another file system
            shutil.copyfile(source, tmp_path / name)
        out[name] = tmp_path / name
    return out


# ---------------------------------------------------------------------------- tests


def test_the_converter_names_the_head_without_size_label(converted: dict[str, Path]) -> None:
    assert sorted(p.name for p in converted["trunk"].parent.iterdir()) == [TRUNK, HEAD]
    embedded, trunk, head = (Model.load(converted[k]) for k in ("embedded", "trunk", "head"))
    assert (embedded.architecture, embedded.n_mtp_heads, embedded.has_mtp_head) == ("qwen35", 1, True)
    assert (trunk.n_mtp_heads, trunk.has_mtp_head, trunk.needs_sidecar) == (0, False, True)  # --no-mtp: no nextn key
    assert (head.n_mtp_heads, head.is_mtp_sidecar) == (1, True)
    assert (trunk.n_layer, trunk.n_embd, trunk.n_vocab) == (head.n_layer, head.n_embd, head.n_vocab) == (4, 64, 50257)


def test_auto_finds_the_converters_sidecar(converted: dict[str, Path]) -> None:
    trunk = Model.load(converted["trunk"])
    assert trunk.sidecar_path == converted["head"]
    assert Model.load(converted["embedded"]).sidecar_path is None  # its own head
    tokens, session = _greedy(trunk)
    assert session.draft_model is not None and session.draft_model.path == converted["head"]
    assert session.draft_model.is_mtp_sidecar


def test_every_conversion_decodes_with_mtp_exactly_as_plain(converted: dict[str, Path]) -> None:
    trunk = Model.load(converted["trunk"])
    plain, _ = _greedy(trunk, draft=None, n_draft=0)
    assert len(plain) == 40
    for model, draft in (
        (Model.load(converted["embedded"]), "auto"),
        (trunk, "auto"),
        (trunk, Model.load(converted["head"])),
    ):
        tokens, session = _greedy(model, draft)
        stats = session.stats()
        assert tokens == plain, (model.path.name, draft)
        assert stats.drafts_generated > 0 and 0 < stats.drafts_accepted < stats.drafts_generated
    embedded_plain, _ = _greedy(Model.load(converted["embedded"]), draft=None, n_draft=0)
    assert embedded_plain == plain  # the same trunk weights in both files


def test_outfile_names_are_found_by_metadata(converted: dict[str, Path], tmp_path: Path) -> None:
    files = _folder(tmp_path, {"qwen.gguf": converted["trunk"], "draft.gguf": converted["head"],
                               "qwen-full.gguf": converted["embedded"]})
    trunk = Model.load(files["qwen.gguf"])
    assert trunk.sidecar_path == files["draft.gguf"]  # the embedded file beside it holds a trunk: not a head
    tokens, session = _greedy(trunk)
    assert session.draft_model is not None and session.draft_model.path == files["draft.gguf"]
    assert tokens == _greedy(trunk, draft=None, n_draft=0)[0]


def test_two_fitting_heads_are_ambiguous(converted: dict[str, Path], tmp_path: Path) -> None:
    files = _folder(tmp_path, {"qwen.gguf": converted["trunk"], "a.gguf": converted["head"], "b.gguf": converted["head"]})
    trunk = Model.load(files["qwen.gguf"])
    message = r"2 MTP head files .* fit the trunk-only model 'qwen.gguf': 'a.gguf', 'b.gguf'\. Pick one with draft_model="
    with pytest.raises(AmbiguousDraftError, match=message):
        MTP(trunk, n_threads=THREADS)
    session = MTP(trunk, draft_model=Model.load(files["b.gguf"]), n_threads=THREADS)  # the way out
    assert session.draft_model is not None and session.draft_model.path == files["b.gguf"]
    _folder(tmp_path, {"mtp-qwen.gguf": converted["head"]})  # or the name of the package's rule
    assert trunk.sidecar_path == tmp_path / "mtp-qwen.gguf"


def test_integrations_take_the_converters_head(converted: dict[str, Path], tmp_path: Path) -> None:
    pytest.importorskip("langchain_core")
    from mtp_llm.langchain import MTPLLM

    llm = MTPLLM(model_path=str(converted["trunk"]), n_threads=THREADS, n_ctx=256, n_draft=3, temperature=0)
    assert llm.client.draft_model is not None and llm.client.draft_model.path == converted["head"]
    files = _folder(tmp_path, {"qwen.gguf": converted["trunk"], "a.gguf": converted["head"], "b.gguf": converted["head"]})
    with pytest.raises(AmbiguousDraftError, match="'a.gguf', 'b.gguf'"):
        _ = MTPLLM(model_path=str(files["qwen.gguf"]), n_threads=THREADS, n_ctx=256).client
    chosen = MTPLLM(model_path=str(files["qwen.gguf"]), draft_model_path=str(files["b.gguf"]), n_threads=THREADS, n_ctx=256)
    assert chosen.client.draft_model is not None and chosen.client.draft_model.path == files["b.gguf"]


def test_a_named_head_of_another_model_is_not_used(
    converted: dict[str, Path], tiny_paths: dict[str, Path], tmp_path: Path
) -> None:
    files = _folder(tmp_path, {"qwen.gguf": converted["trunk"], "mtp-qwen.gguf": tiny_paths["mtp-random-trunk"]})
    trunk = Model.load(files["qwen.gguf"])
    assert trunk.sidecar_path is None
    with pytest.raises(IncompatibleDraftError, match=r"'mtp-qwen.gguf': its architecture is 'hy_v3', the target's 'qwen35'"):
        MTP(trunk, n_threads=THREADS)
    _folder(tmp_path, {"head.gguf": converted["head"]})
    assert trunk.sidecar_path == tmp_path / "head.gguf"


def test_sidecar_names() -> None:
    assert sidecar_names("Qwen3.5-9B-F16.gguf") == ["mtp-Qwen3.5-9B-F16.gguf", "mtp-Qwen3.5-F16.gguf"]
    assert sidecar_names("Qwen3.5-35B-A3B-Instruct-Q4_K_M.gguf") == [
        "mtp-Qwen3.5-35B-A3B-Instruct-Q4_K_M.gguf", "mtp-Qwen3.5-Instruct-Q4_K_M.gguf"]
    assert sidecar_names("Qwen3.5-9B-F16-00001-of-00002.gguf") == [
        "mtp-Qwen3.5-9B-F16-00001-of-00002.gguf", "mtp-Qwen3.5-9B-F16.gguf",
        "mtp-Qwen3.5-F16-00001-of-00002.gguf", "mtp-Qwen3.5-F16.gguf"]
    assert sidecar_names("random-trunk.gguf") == ["mtp-random-trunk.gguf"]


def test_hub_pairs_each_trunk_with_its_converter_head(
    converted: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("huggingface_hub")
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "models--qwen--tiny"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    # Two conversions of one checkpoint, as a repository publishes them: the heads have no size label.
    for kind in ("F32", "BF16"):
        (snapshot / f"Qwen3.5-6.6M-{kind}.gguf").symlink_to(converted["trunk"])
        (snapshot / f"mtp-Qwen3.5-{kind}.gguf").symlink_to(converted["head"])
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = Model.from_pretrained("qwen/tiny", "*BF16.gguf", cache_dir=tmp_path)
    assert model.path.name == "Qwen3.5-6.6M-BF16.gguf"
    assert model.sidecar_path is not None and model.sidecar_path.name == "mtp-Qwen3.5-BF16.gguf"
