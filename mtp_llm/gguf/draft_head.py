"""Quantized draft heads: a model's MTP head written as an ``mtp-`` sidecar at lower precision.

A draft only proposes tokens and the target verifies every one, so the head's weights can be
stored at lower precision than the trunk's without changing the output: greedy MTP output stays
the target's own; only the acceptance rate may move. On a memory-bound CPU one draft step costs
about what reading the head's weights costs: its decoder block, ``nextn.eh_proj`` and the LM head
it projects with (for a 32000-token vocabulary the largest of the three). In q4_0 those are about
3.5x fewer bytes than in f16.

:func:`write_draft_head` reads a GGUF with an embedded MTP head (or an ``mtp-`` sidecar) and writes
a sidecar holding:

* the file's global tensors (token embeddings, final norm, ...), except ``output.weight``;
* every tensor of the MTP blocks ``blk.{n_layer}`` .. ``blk.{block_count - 1}``;
* the LM head the draft projects with: the file's own ``nextn.shared_head_head``, else
  ``output.weight``, else ``token_embd.weight`` (tied), written as
  ``blk.{n_layer}.nextn.shared_head_head.weight``, which every MTP graph of llama.cpp prefers
  over the trunk's ``output.weight``. Where that does not work (a loader that requires
  ``output.weight`` even in an MTP-only file, or several heads that would each need a copy)
  it is written once as ``output.weight``, which the MTP graphs fall back to.

Matrices are converted to the requested type (``gguf.quants``, row chunk by row chunk, one
tensor in memory at a time); 1-D tensors (norms, biases) are stored as f32, which llama.cpp's
CPU kernels and the engine's checks require; the 2-D tensors ``llama-quantize`` never quantizes
(norms, MoE routers, conv1d kernels, integer tables) keep their type; a matrix whose rows are not
a multiple of the type's block falls back to f16, as ``llama-quantize`` falls back. The metadata
is the source's, with ``general.file_type`` set to the new type: the sidecar declares the same
blocks as the model, and llama.cpp's loader sees no trunk (no ``blk.0.attn_norm.weight``) and
loads the head alone.

Use it with the target, which keeps its embedded head (or loads without it)::

    sidecar = write_draft_head("model.gguf", file_type="q4_0")
    session = MTP(Model.load("model.gguf", load_mtp=False), draft_model=Model.load(sidecar))
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .common import GGUF_FILE_TYPE, StreamedTensor, copy_metadata, ggml_type, write_streamed, written_atomically

DraftHeadType = Literal["f16", "q8_0", "q4_0"]
DRAFT_HEAD_TYPES: tuple[str, ...] = ("f16", "q8_0", "q4_0")

SIDECAR_ARCHITECTURES: tuple[str, ...] = (
    "bailingmoe3", "cohere2moe", "deepseek2", "deepseek32", "deepseek4", "glm-dsa", "glm4moe",
    "hy_v3", "llama", "mimo2", "nemotron_h_moe", "qwen35", "qwen35moe", "qwen3next", "step35",
)
"""Architectures whose loader in the pinned llama.cpp (``src/models/*.cpp``) accepts an MTP-only
file (``mtp_only``: MTP layers declared, no ``blk.0.attn_norm.weight``) and which have an MTP
draft graph (llama through patch 0005). glm5-next has a graph but its loader has no MTP-only mode
yet. Tested here: hy_v3, qwen35 and llama (the architectures the project writes)."""

DRAFT_VOCAB_ARCHITECTURES: tuple[str, ...] = ("hy_v3", "llama", "qwen35", "qwen35moe")
"""Architectures whose MTP graph takes a trimmed head (patch 0007)."""

DRAFT_VOCAB_KEY = "mtp_llm.draft_vocab_size"
"""Metadata key holding N in a file with a trimmed head (the ``d2t`` tensor is authoritative)."""

# Loaders that create output.weight as required even for an MTP-only file.
_OUTPUT_REQUIRED = ("deepseek4", "mimo2")

# Parts of names of 2-D tensors llama-quantize leaves unquantized (tensor_allows_quantization
# in src/llama-quant.cpp): norms, MoE routers and their integer tables, conv1d kernels, T5's
# relative position bias, hyper-connection mixers.
_KEEP_TYPE = ("_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid", "ssm_conv1d", "attn_rel_b", "hc_")

_CHUNK_ELEMENTS = 1 << 21  # converted per step: about 8 MB of f32


def draft_head_path(model_path: str | os.PathLike[str], file_type: str) -> Path:
    """The default sidecar path: ``mtp-<stem>-<type>.gguf`` beside the model (``<stem>`` without
    a leading ``mtp-`` when the model is itself a sidecar)."""
    model_path = Path(model_path)
    stem = model_path.stem.removeprefix("mtp-")
    return model_path.with_name(f"mtp-{stem}-{file_type}.gguf")


def write_draft_head(
    model_path: str | os.PathLike[str],
    out_path: str | os.PathLike[str] | None = None,
    file_type: DraftHeadType | str = "q8_0",
    *,
    draft_vocab: Sequence[int] | np.ndarray | None = None,
) -> Path:
    """Write the MTP head of ``model_path`` as a sidecar whose matrices are ``file_type``.

    ``out_path``: the file to write, or a directory for the default name
    (:func:`draft_head_path`, beside the model when None). Returns the written path.
    ``draft_vocab``: token ids for a trimmed head (:mod:`mtp_llm.gguf.draft_vocab`): each head's
    LM head keeps those rows, and ``d2t`` maps them back.

    Raises :class:`~mtp_llm.InvalidOptionError` for an unknown ``file_type``,
    :class:`~mtp_llm.ModelLoadError` when the file cannot be read as a GGUF, and
    :class:`~mtp_llm.MissingMTPHeadError` when it has no MTP head tensors (none declared,
    a trunk-only file) or an architecture whose loader cannot load a head alone.
    """
    import gguf

    from ..errors import InvalidOptionError, MissingMTPHeadError, ModelLoadError

    if file_type not in DRAFT_HEAD_TYPES:
        raise InvalidOptionError(f"draft head type {file_type!r}: one of {', '.join(DRAFT_HEAD_TYPES)}")
    model_path = Path(model_path)
    try:
        reader = gguf.GGUFReader(str(model_path))
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise ModelLoadError(f"cannot read '{model_path}' as a GGUF file: {exc}") from exc

    def field(key: str) -> Any:  # gguf field values are heterogeneous
        f = reader.fields.get(key)
        return None if f is None else f.contents()

    arch = str(field("general.architecture"))
    n_blocks = int(field(f"{arch}.block_count") or 0)
    n_heads = int(field(f"{arch}.nextn_predict_layers") or 0)
    n_layer = n_blocks - n_heads
    tensors = {t.name: t for t in reader.tensors}
    if n_heads < 1:
        raise MissingMTPHeadError(f"'{model_path}' has no MTP head ({arch}.nextn_predict_layers is 0 or absent)")
    if f"blk.{n_layer}.nextn.eh_proj.weight" not in tensors:
        raise MissingMTPHeadError(
            f"'{model_path}' declares {n_heads} MTP head(s) but stores no head tensors (a trunk-only "
            "file): convert its mtp-*.gguf sidecar instead"
        )
    if arch not in SIDECAR_ARCHITECTURES:
        raise MissingMTPHeadError(
            f"'{model_path}' has architecture '{arch}', whose llama.cpp loader cannot load an MTP head "
            f"alone (or which has no MTP draft graph); sidecar heads work for {', '.join(SIDECAR_ARCHITECTURES)}"
        )

    head_blocks = tuple(f"blk.{i}." for i in range(n_layer, n_blocks))
    chosen = [
        (t.name, t) for t in reader.tensors
        if t.name.startswith(head_blocks) or (not t.name.startswith("blk.") and t.name != "output.weight")
    ]
    lm_head = tensors.get("output.weight", tensors.get("token_embd.weight"))
    if lm_head is None:
        raise MissingMTPHeadError(f"'{model_path}' has neither output.weight nor token_embd.weight")
    lacking = [b for b in head_blocks if b + "nextn.shared_head_head.weight" not in tensors]
    if arch in _OUTPUT_REQUIRED or len(lacking) > 1:
        chosen.append(("output.weight", lm_head))
    elif lacking:
        chosen.append((lacking[0] + "nextn.shared_head_head.weight", lm_head))

    trimmed: list[StreamedTensor] = []
    if draft_vocab is not None:
        trimmed = trimmed_lm_heads(reader, head_layout(reader, model_path)[0], np.asarray(draft_vocab, dtype=np.int64))
        chosen = [(name, t) for name, t in chosen if not name.endswith("shared_head_head.weight") and name != "output.weight"]

    qtype = ggml_type(file_type)
    entries: list[StreamedTensor] = []
    for name, tensor in chosen:
        shape = tuple(int(d) for d in reversed(tensor.shape))  # numpy order: rows last
        target = _stored_type(name, shape, tensor.tensor_type, qtype)
        entries.append((name, shape, target, _converter(tensor, shape, target)))
    for name, shape, source, gather in trimmed:  # gathered rows, converted like the rest
        target = _stored_type(name, shape, source, qtype)
        entries.append((name, shape, target, _converted(gather, shape, source, target)))

    out = draft_head_path(model_path, file_type) if out_path is None else Path(out_path)
    if out.is_dir():
        out = out / draft_head_path(model_path, file_type).name
    with written_atomically(out) as tmp:
        writer = gguf.GGUFWriter(str(tmp), arch)
        # the source's metadata, with the new file type
        skip = ("general.architecture", "general.file_type") + ((DRAFT_VOCAB_KEY,) if trimmed else ())
        copy_metadata(reader, writer, skip=skip)
        writer.add_file_type(GGUF_FILE_TYPE[file_type])
        if trimmed:
            writer.add_uint32(DRAFT_VOCAB_KEY, trimmed[-1][1][0])  # d2t's length
        write_streamed(writer, entries)
    return out


def _stored_type(name: str, shape: Sequence[int], source: Any, qtype: Any) -> Any:
    """The type a tensor of the sidecar is stored as (see the module docstring)."""
    import gguf

    t = gguf.GGMLQuantizationType
    if len(shape) == 1:
        return t.F32 if source in (t.F32, t.F16, t.BF16) else source
    if any(part in name for part in _KEEP_TYPE) or not name.endswith("weight"):
        return source
    block, _ = gguf.GGML_QUANT_SIZES[qtype]
    return qtype if shape[-1] % block == 0 else t.F16


def _converter(tensor: Any, shape: tuple[int, ...], target: Any) -> Callable[[], np.ndarray]:
    """A function returning ``tensor``'s data stored as ``target`` (rows converted a chunk at a time)."""
    return _converted(lambda: np.asarray(tensor.data), shape, tensor.tensor_type, target)


def _converted(
    stored: Callable[[], np.ndarray], shape: tuple[int, ...], source: Any, target: Any
) -> Callable[[], np.ndarray]:
    """A function returning the data ``stored()`` returns (``source`` type) as ``target``."""
    import gguf

    if source == target:
        return stored

    def convert() -> np.ndarray:
        data = stored()
        rows = data.reshape(-1, data.shape[-1])  # elements or bytes of a row
        out = np.empty(gguf.quants.quant_shape_to_byte_shape((rows.shape[0], shape[-1]), target), dtype=np.uint8)
        step = max(1, _CHUNK_ELEMENTS // shape[-1])
        for a in range(0, rows.shape[0], step):
            values = gguf.quants.dequantize(rows[a : a + step], source)
            out[a : a + step] = gguf.quants.quantize(values.astype(np.float32, copy=False), target).view(np.uint8)
        return out

    return convert


def head_layout(reader: Any, path: Path) -> tuple[tuple[str, ...], str]:
    """The MTP head blocks (``blk.{i}.`` prefixes) of a file whose head can be trimmed, and its
    architecture; raises MissingMTPHeadError / InvalidOptionError where it cannot."""
    from ..errors import InvalidOptionError, MissingMTPHeadError

    arch = str(reader.fields["general.architecture"].contents())
    f_blocks = reader.fields.get(f"{arch}.block_count")
    f_heads = reader.fields.get(f"{arch}.nextn_predict_layers")
    n_blocks = int(f_blocks.contents()) if f_blocks is not None else 0
    n_heads = int(f_heads.contents()) if f_heads is not None else 0
    names = {t.name for t in reader.tensors}
    if n_heads < 1 or f"blk.{n_blocks - n_heads}.nextn.eh_proj.weight" not in names:
        raise MissingMTPHeadError(f"'{path}' stores no MTP head to trim")
    if arch not in DRAFT_VOCAB_ARCHITECTURES:
        raise InvalidOptionError(
            f"'{path}' has architecture '{arch}': trimmed draft vocabularies work for "
            f"{', '.join(DRAFT_VOCAB_ARCHITECTURES)}"
        )
    if "d2t" in names:
        raise InvalidOptionError(f"'{path}' already has a trimmed draft vocabulary: trim the full model instead")
    return tuple(f"blk.{i}." for i in range(n_blocks - n_heads, n_blocks)), arch


def trimmed_lm_heads(reader: Any, head_blocks: Sequence[str], ids: np.ndarray) -> list[StreamedTensor]:
    """``blk.{i}.nextn.shared_head_head.weight`` for each head block (rows ``ids`` of the block's
    own LM head, else of ``output.weight``, else of ``token_embd.weight``, as stored) and ``d2t``."""
    import gguf

    from ..errors import InvalidOptionError, MissingMTPHeadError

    tensors = {t.name: t for t in reader.tensors}
    lm = tensors.get("output.weight", tensors.get("token_embd.weight"))
    out: list[StreamedTensor] = []
    for block in head_blocks:
        source = tensors.get(block + "nextn.shared_head_head.weight", lm)
        if source is None:
            raise MissingMTPHeadError("the file has no LM matrix (output.weight or token_embd.weight)")
        n_rows, n_embd = int(source.shape[-1]), int(source.shape[0])
        if len(ids) and (ids.min() < 0 or ids.max() >= n_rows or len(np.unique(ids)) != len(ids)):
            raise InvalidOptionError(f"draft vocabulary ids must be distinct token ids below {n_rows}")
        out.append((block + "nextn.shared_head_head.weight", (len(ids), n_embd), source.tensor_type,
                    _gathered(source, ids)))
    out.append(("d2t", (len(ids),), gguf.GGMLQuantizationType.I64, lambda: np.asarray(ids, dtype=np.int64)))
    return out


def _gathered(tensor: Any, ids: np.ndarray) -> Any:
    """Rows ``ids`` of a 2-D tensor's stored data (elements or quantized blocks of a row)."""
    return lambda: np.ascontiguousarray(tensor.data.reshape(-1, tensor.data.shape[-1])[ids])


__all__: Sequence[str] = (
    "DRAFT_HEAD_TYPES",
    "DRAFT_VOCAB_ARCHITECTURES",
    "DRAFT_VOCAB_KEY",
    "DraftHeadType",
    "SIDECAR_ARCHITECTURES",
    "draft_head_path",
    "write_draft_head",
)
