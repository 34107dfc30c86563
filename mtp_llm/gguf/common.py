"""What the GGUF writers share: the byte-level BPE vocabulary and its ``tokenizer.*`` keys,
the tensor shapes of a model and of its MTP (nextn) head and their check, the weight formats'
ggml types and file types, and the start and the final write of a ``gguf.GGUFWriter`` (all
tensors in memory, or streamed one at a time).

:func:`tiny_vocab` is the vocabulary of the tiny test models (:mod:`mtp_llm.gguf.tiny_models`)
and the default of :func:`mtp_llm.gguf.qwen35.write_qwen35`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np


@dataclasses.dataclass(frozen=True)
class BpeVocab:
    """A byte-level BPE vocabulary (llama.cpp tokenizer model ``gpt2``).

    ``tokens`` are in GPT-2's byte-to-unicode form, as in a Hugging Face
    ``tokenizer.json``; ``token_types`` use llama.cpp's values (1 normal,
    3 control, 6 byte); at least one merge is required by llama.cpp.
    """

    tokens: Sequence[str]
    token_types: Sequence[int]
    merges: Sequence[str]
    bos_id: int
    eos_id: int
    pre: str = "gpt-2"
    add_bos: bool = False


def add_bpe_vocab(writer: Any, vocab: BpeVocab, chat_template: str | None = None) -> None:
    """Write ``vocab`` (and an optional chat template) as the ``tokenizer.*`` keys of a ``gguf.GGUFWriter``."""
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(vocab.pre)
    writer.add_token_list(list(vocab.tokens))
    writer.add_token_types(list(vocab.token_types))
    writer.add_token_merges(list(vocab.merges))
    writer.add_bos_token_id(vocab.bos_id)
    writer.add_eos_token_id(vocab.eos_id)
    writer.add_add_bos_token(vocab.add_bos)
    if chat_template:
        writer.add_chat_template(chat_template)


Shapes = dict[str, tuple[int, ...]]
"""Tensor shapes in PyTorch ``(out_features, in_features)`` layout, keyed by GGUF name or block suffix."""


def nextn_shapes(n_embd: int) -> Shapes:
    """The MTP head's own tensors (beside its transformer block): ``eh_proj`` over
    [enorm(embedding), hnorm(hidden)] and the head's final norm."""
    return {
        "nextn.eh_proj.weight": (n_embd, 2 * n_embd),
        "nextn.enorm.weight": (n_embd,),
        "nextn.hnorm.weight": (n_embd,),
        "nextn.shared_head_norm.weight": (n_embd,),
    }


def model_shapes(n_vocab: int, n_embd: int, blocks: Iterable[tuple[int, Mapping[str, tuple[int, ...]]]]) -> Shapes:
    """Every tensor of a model with a tied output head: the embeddings, the final norm, and
    ``blk.{i}.{suffix}`` for each (block index, shapes by suffix) in ``blocks``, in that order."""
    shapes: Shapes = {"token_embd.weight": (n_vocab, n_embd), "output_norm.weight": (n_embd,)}
    for i, block in blocks:
        for suffix, shape in block.items():
            shapes[f"blk.{i}.{suffix}"] = shape
    return shapes


def check_tensor_shapes(
    expected: Mapping[str, tuple[int, ...]], tensors: Mapping[str, np.ndarray], output_shape: tuple[int, int]
) -> None:
    """Every expected tensor present with its shape; an untied ``output.weight`` is allowed."""
    missing = [n for n in expected if n not in tensors]
    if missing:
        raise ValueError(f"missing tensors: {missing[:5]}")
    for name, array in tensors.items():
        want = expected.get(name) if name != "output.weight" else output_shape
        if want is None:
            raise ValueError(f"unexpected tensor {name!r}")
        if tuple(array.shape) != want:
            raise ValueError(f"{name}: shape {array.shape}, expected {want}")


class ModelConfig(Protocol):
    """What :func:`start_file` and :func:`open_writer` read of a writer's model shape (``HyV3Config``, ``Qwen35Config``)."""

    @property
    def name(self) -> str: ...
    @property
    def n_vocab(self) -> int: ...
    @property
    def n_embd(self) -> int: ...
    @property
    def n_layer(self) -> int: ...
    @property
    def n_nextn(self) -> int: ...
    @property
    def n_ff(self) -> int: ...
    @property
    def n_ctx_train(self) -> int: ...
    def tensor_shapes(self) -> Shapes: ...


def start_file(
    path: str | Path,
    arch: str,
    config: ModelConfig,
    tensors: Mapping[str, np.ndarray],
    *,
    file_type: int,
    split_max_tensors: int = 0,
) -> Any:
    """Check ``tensors`` against ``config`` and :func:`open_writer`. The caller adds its
    architecture's keys, the vocabulary and the tensors, then calls :func:`finish_file`."""
    check_tensor_shapes(config.tensor_shapes(), tensors, (config.n_vocab, config.n_embd))
    return open_writer(path, arch, config, file_type=file_type, split_max_tensors=split_max_tensors)


def open_writer(
    path: str | Path, arch: str, config: ModelConfig, *, file_type: int, split_max_tensors: int = 0
) -> Any:
    """A ``gguf.GGUFWriter`` for ``arch`` with the metadata every writer sets: name, file type,
    context, sizes, and ``n_layer`` trunk blocks followed by ``n_nextn`` MTP blocks.

    ``split_max_tensors`` > 0 writes a split GGUF as llama.cpp's ``gguf-split`` does:
    ``<stem>-00001-of-0000N.gguf``..., at most that many tensors each, the metadata in the
    first file and ``split.no``, ``split.count``, ``split.tensors.count`` in every file.
    """
    import gguf

    writer = gguf.GGUFWriter(str(path), arch, split_max_tensors=split_max_tensors)
    writer.add_name(config.name)
    writer.add_file_type(file_type)
    writer.add_context_length(config.n_ctx_train)
    writer.add_embedding_length(config.n_embd)
    writer.add_block_count(config.n_layer + config.n_nextn)
    writer.add_nextn_predict_layers(config.n_nextn)
    writer.add_feed_forward_length(config.n_ff)
    return writer


def finish_file(writer: Any) -> None:
    """Write header, metadata and tensors of a ``gguf.GGUFWriter`` and close it."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


#: ``general.file_type`` (llama.cpp's ``llama_ftype``) of a file whose matrices are in a weight format.
GGUF_FILE_TYPE: dict[str, int] = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 7, "bf16": 32}


def ggml_type(fmt: str) -> Any:
    """The ``gguf.GGMLQuantizationType`` of a weight format (``f32``, ``f16``, ``bf16``, ``q8_0``, ``q4_0``)."""
    import gguf

    return gguf.GGMLQuantizationType[fmt.upper()]


StreamedTensor = tuple[str, tuple[int, ...], Any, Callable[[], np.ndarray]]
"""A tensor for :func:`write_streamed`: GGUF name, shape in numpy (PyTorch) order, the
``gguf.GGMLQuantizationType`` it is stored as, and a function returning its stored data."""


def write_streamed(writer: Any, tensors: Sequence[StreamedTensor]) -> None:
    """Write a ``gguf.GGUFWriter``'s header, metadata and tensor infos, then each tensor's data,
    made by its function just before it is written (one tensor in memory at a time), and close it."""
    import gguf

    sizes = []
    for name, shape, qtype, _ in tensors:
        byte_shape = gguf.quants.quant_shape_to_byte_shape(shape, qtype)
        sizes.append(int(np.prod(byte_shape)))
        writer.add_tensor_info(name, byte_shape, np.dtype(np.uint8), sizes[-1], raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for (name, _, _, make), nbytes in zip(tensors, sizes):
        data = make()
        if data.nbytes != nbytes:
            raise AssertionError(f"{name}: {data.nbytes} bytes, expected {nbytes}")
        writer.write_tensor_data(data)
    writer.close()


def copy_metadata(reader: Any, writer: Any, skip: Sequence[str] = ()) -> None:
    """Every metadata key of a ``gguf.GGUFReader`` to a ``gguf.GGUFWriter``, but the reader's own
    ``GGUF.*`` fields, ``general.alignment`` and the keys in ``skip``."""
    import gguf

    for f in reader.fields.values():
        if f.name.startswith("GGUF.") or f.name in (*skip, "general.alignment"):
            continue
        sub_type = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(f.name, f.contents(), f.types[0], sub_type=sub_type)


@contextlib.contextmanager
def written_atomically(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write the file to: it replaces ``path`` when the
    block ends normally and is removed when it raises, so ``path`` is never half written."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable unicode map used by byte-level BPE."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def tiny_vocab() -> BpeVocab:
    """256 byte tokens, a handful of merges, and ``<|endoftext|>`` as BOS/EOS."""
    b2u = byte_to_unicode()
    tokens = [b2u[b] for b in range(256)]
    types = [1] * 256
    merges = []
    for pair in [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("a", "n"), ("e", "r"), ("o", "n")]:
        merges.append(f"{pair[0]} {pair[1]}")
        tokens.append(pair[0] + pair[1])
        types.append(1)
    tokens.append("<|endoftext|>")
    types.append(3)
    eos = len(tokens) - 1
    return BpeVocab(tokens=tokens, token_types=types, merges=merges, bos_id=eos, eos_id=eos)
