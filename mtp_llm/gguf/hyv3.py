"""Write and split hy_v3 GGUF files with an MTP (nextn) head.

hy_v3 is the simplest architecture llama.cpp runs with an MTP head: a dense
pre-norm transformer (RMSNorm, QK-norm, NEOX rope, SwiGLU) whose extra last
block predicts token t+2 from the trunk's post-norm hidden state at t and the
embedding of token t+1. This module writes such models from numpy arrays (the
tiny test models and the trained default model use it) and splits an embedded
model into a trunk-only file plus an ``mtp-`` sidecar.

Tensors are given with their GGUF names and PyTorch ``nn.Linear`` layout
(out_features, in_features); the writer stores them as ggml expects.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .common import (
    GGUF_FILE_TYPE,
    BpeVocab,
    Shapes,
    add_bpe_vocab,
    finish_file,
    model_shapes,
    nextn_shapes,
    start_file,
)

ARCH = "hy_v3"
Part = Literal["full", "trunk", "mtp"]
FileType = Literal["f32", "f16", "bf16", "q8_0"]


@dataclasses.dataclass(frozen=True)
class HyV3Config:
    """Shape of a dense hy_v3 model with ``n_nextn`` MTP heads."""

    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_nextn: int = 1
    n_ctx_train: int = 4096
    rope_freq_base: float = 10000.0
    rms_norm_eps: float = 1e-6
    name: str = "mtp-llm-tiny"

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def block_shapes(self) -> Shapes:
        """Per-block tensor shapes in PyTorch layout, keyed by suffix."""
        hd, e = self.head_dim, self.n_embd
        return {
            "attn_norm.weight": (e,),
            "attn_q.weight": (self.n_head * hd, e),
            "attn_k.weight": (self.n_head_kv * hd, e),
            "attn_v.weight": (self.n_head_kv * hd, e),
            "attn_output.weight": (e, self.n_head * hd),
            "attn_q_norm.weight": (hd,),
            "attn_k_norm.weight": (hd,),
            "ffn_norm.weight": (e,),
            "ffn_gate.weight": (self.n_ff, e),
            "ffn_up.weight": (self.n_ff, e),
            "ffn_down.weight": (e, self.n_ff),
        }

    def tensor_shapes(self) -> Shapes:
        """Every tensor of the embedded model (tied output head)."""
        n_blocks = self.n_layer + self.n_nextn
        blocks = [(i, self.block_shapes()) for i in range(n_blocks)]
        blocks += [(i, nextn_shapes(self.n_embd)) for i in range(self.n_layer, n_blocks)]
        return model_shapes(self.n_vocab, self.n_embd, blocks)


def _is_trunk_tensor(name: str, config: HyV3Config) -> bool:
    if not name.startswith("blk."):
        return True
    return int(name.split(".")[1]) < config.n_layer


def _part_tensors(name: str, config: HyV3Config, part: Part) -> bool:
    if part == "full":
        return True
    shared = name in ("token_embd.weight", "output_norm.weight", "output.weight")
    if part == "trunk":
        return _is_trunk_tensor(name, config)
    return shared or not _is_trunk_tensor(name, config)


def add_hy_v3_keys(writer: Any, config: HyV3Config) -> None:
    """The hy_v3 metadata keys past :func:`~.common.open_writer`'s common ones."""
    writer.add_expert_feed_forward_length(config.n_ff)
    writer.add_head_count(config.n_head)
    writer.add_head_count_kv(config.n_head_kv)
    writer.add_rope_dimension_count(config.head_dim)
    writer.add_rope_freq_base(config.rope_freq_base)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)


def write_hy_v3(
    path: str | Path,
    config: HyV3Config,
    tensors: Mapping[str, np.ndarray],
    vocab: BpeVocab,
    *,
    part: Part = "full",
    file_type: FileType = "f32",
    chat_template: str | None = None,
    split_max_tensors: int = 0,
) -> Path:
    """Write ``tensors`` as a hy_v3 GGUF; returns the file to load (the first part of a split one).

    ``part`` selects the embedded model ("full"), the trunk only ("trunk", the
    MTP head declared in metadata but stored elsewhere) or the ``mtp-`` sidecar
    ("mtp": embeddings, final norm and the head, no trunk blocks).
    Norm weights always stay f32; matrices follow ``file_type`` (``q8_0`` needs
    row lengths that are multiples of 32). ``split_max_tensors`` > 0 splits the file
    (see :func:`~.common.open_writer`).
    """
    import gguf

    path = Path(path)
    writer = start_file(
        path, ARCH, config, tensors, file_type=GGUF_FILE_TYPE[file_type], split_max_tensors=split_max_tensors
    )
    add_hy_v3_keys(writer, config)

    add_bpe_vocab(writer, vocab, chat_template)

    for name, array in tensors.items():
        if not _part_tensors(name, config, part):
            continue
        data = np.ascontiguousarray(array, dtype=np.float32)
        if file_type == "f16" and data.ndim == 2:
            data = data.astype(np.float16)
        elif file_type in ("bf16", "q8_0") and data.ndim == 2:
            qtype = gguf.GGMLQuantizationType.BF16 if file_type == "bf16" else gguf.GGMLQuantizationType.Q8_0
            writer.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
            continue
        writer.add_tensor(name, data)

    names = writer.format_shard_names(path)
    finish_file(writer)
    return Path(names[0])


def read_hy_v3(path: str | Path) -> tuple[HyV3Config, dict[str, np.ndarray], BpeVocab, str | None]:
    """Read a hy_v3 GGUF written by :func:`write_hy_v3` back into numpy arrays."""
    import gguf

    reader = gguf.GGUFReader(str(path))

    def field(key: str) -> Any:  # gguf field values are heterogenous
        f = reader.fields.get(key)
        return None if f is None else f.contents()

    arch = field("general.architecture")
    if arch != ARCH:
        raise ValueError(f"{path}: architecture {arch!r}, expected {ARCH!r}")
    n_layer_all = int(field(f"{ARCH}.block_count"))
    n_nextn = int(field(f"{ARCH}.nextn_predict_layers") or 0)
    config = HyV3Config(
        n_vocab=len(field("tokenizer.ggml.tokens")),
        n_embd=int(field(f"{ARCH}.embedding_length")),
        n_layer=n_layer_all - n_nextn,
        n_head=int(field(f"{ARCH}.attention.head_count")),
        n_head_kv=int(field(f"{ARCH}.attention.head_count_kv")),
        n_ff=int(field(f"{ARCH}.feed_forward_length")),
        n_nextn=n_nextn,
        n_ctx_train=int(field(f"{ARCH}.context_length")),
        rope_freq_base=float(field(f"{ARCH}.rope.freq_base") or 10000.0),
        rms_norm_eps=float(field(f"{ARCH}.attention.layer_norm_rms_epsilon")),
        name=str(field("general.name") or "model"),
    )
    vocab = BpeVocab(
        tokens=list(field("tokenizer.ggml.tokens")),
        token_types=[int(t) for t in field("tokenizer.ggml.token_type")],
        merges=list(field("tokenizer.ggml.merges")),
        bos_id=int(field("tokenizer.ggml.bos_token_id")),
        eos_id=int(field("tokenizer.ggml.eos_token_id")),
        pre=str(field("tokenizer.ggml.pre")),
        add_bos=bool(field("tokenizer.ggml.add_bos_token")),
    )
    tensors = {
        t.name: np.array(t.data, dtype=np.float32).reshape(tuple(reversed([int(d) for d in t.shape])))
        for t in reader.tensors
    }
    return config, tensors, vocab, field("tokenizer.chat_template")


def split_mtp(embedded: str | Path, out_dir: str | Path) -> tuple[Path, Path]:
    """Split an embedded hy_v3 model into ``NAME-trunk.gguf`` and ``mtp-NAME-trunk.gguf``.

    This is the layout of checkpoints that ship the MTP head as a sidecar: load
    the trunk as the target and the sidecar as ``draft_model``.
    """
    embedded = Path(embedded)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config, tensors, vocab, template = read_hy_v3(embedded)
    if config.n_nextn < 1:
        raise ValueError(f"{embedded} has no MTP head to split off")
    file_type: FileType = "f16" if any(
        t.ndim == 2 and t.dtype == np.float16 for t in _raw_tensor_dtypes(embedded)
    ) else "f32"
    trunk = out_dir / f"{embedded.stem}-trunk.gguf"
    sidecar = out_dir / f"mtp-{embedded.stem}-trunk.gguf"
    write_hy_v3(trunk, config, tensors, vocab, part="trunk", file_type=file_type, chat_template=template)
    write_hy_v3(sidecar, config, tensors, vocab, part="mtp", file_type=file_type, chat_template=template)
    return trunk, sidecar


def _raw_tensor_dtypes(path: Path) -> list[np.ndarray]:
    import gguf

    return [np.empty((1, 1), dtype=t.data.dtype) for t in gguf.GGUFReader(str(path)).tensors]
