"""Trimmed draft vocabularies: an MTP head that scores only the N tokens that matter.

A draft pass's largest cost is usually the head's LM matrix (``n_vocab`` rows). A trimmed head
keeps N of its rows (the N most frequent tokens, plus every control token the chat formats
need) and stores ``d2t`` (I64, [N]): the target id of each row. llama.cpp's MTP graphs
(patch 0007 for ``llama``, ``hy_v3``, ``qwen35``, ``qwen35moe``) multiply by the N-row matrix and
scatter the N logits into a full row of ``-inf``, so drafts are ids of the full vocabulary and
the target verifies over the full vocabulary: output is unchanged, only acceptance may drop
(a token outside the N is never drafted). ``docs/draft-vocab.md`` says how to choose N.

* :func:`draft_vocab_ids`: the sorted token set of size N from token counts
  (:func:`mtp_llm.draft_vocab.token_frequencies`: of a corpus, or of the model's own answers);
* :func:`write_trimmed_head`: an ``mtp-`` sidecar with a trimmed head (``mtp-llm draft-head
  MODEL --draft-vocab N``);
* :func:`trim_embedded_head`: a copy of a whole GGUF whose embedded head is trimmed (every other
  tensor byte for byte).

Rows are gathered as stored (a quantized row is whole blocks), so row ``i`` of a trimmed head
is exactly row ``d2t[i]`` of the full one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .common import StreamedTensor, copy_metadata, write_streamed, written_atomically
from .draft_head import (
    DRAFT_VOCAB_ARCHITECTURES,
    DRAFT_VOCAB_KEY,
    draft_head_path,
    head_layout,
    trimmed_lm_heads,
    write_draft_head,
)

_CONTROL, _USER_DEFINED = 3, 4  # llama.cpp token types kept in every trimmed head
_SPECIAL_ID_KEYS = ("bos", "eos", "eot", "eom", "sep", "pad", "unknown")


def special_token_ids(model_path: str | os.PathLike[str], reader: Any = None) -> np.ndarray:
    """Ids a trimmed head always keeps: control and user-defined tokens (chat-format markers,
    EOS/EOT) and the ids the tokenizer keys name, sorted (``reader``: the file's open ``GGUFReader``)."""
    reader = reader or _reader(model_path)
    types = reader.fields.get("tokenizer.ggml.token_type")
    ids: set[int] = set()
    if types is not None:
        values = np.asarray(types.contents())
        ids.update(int(i) for i in np.flatnonzero((values == _CONTROL) | (values == _USER_DEFINED)))
    for key in _SPECIAL_ID_KEYS:
        f = reader.fields.get(f"tokenizer.ggml.{key}_token_id")
        if f is not None:
            ids.add(int(f.contents()))
    return np.array(sorted(ids), dtype=np.int64)


def draft_vocab_ids(counts: np.ndarray, n: int, keep: Sequence[int] | np.ndarray = ()) -> np.ndarray:
    """The N token ids of a trimmed head, sorted: every id of ``keep``, then the most frequent
    of ``counts`` (ties and unseen tokens by lower id)."""
    from ..errors import InvalidOptionError

    n_vocab = len(counts)
    keep = np.unique(np.asarray(keep, dtype=np.int64))
    keep = keep[(keep >= 0) & (keep < n_vocab)]
    if not len(keep) <= n <= n_vocab:
        raise InvalidOptionError(
            f"draft vocabulary size {n}: between the {len(keep)} control tokens it must keep and n_vocab {n_vocab}"
        )
    order = np.lexsort((np.arange(n_vocab), -np.asarray(counts)))  # by count desc, then id
    chosen = np.zeros(n_vocab, dtype=bool)
    chosen[keep] = True
    rest = order[~chosen[order]][: n - len(keep)]
    chosen[rest] = True
    return np.flatnonzero(chosen).astype(np.int64)


def write_trimmed_head(
    model_path: str | os.PathLike[str],
    ids: Sequence[int] | np.ndarray,
    out_path: str | os.PathLike[str] | None = None,
    file_type: str = "q8_0",
) -> Path:
    """Write ``model_path``'s MTP head as a sidecar that scores the tokens ``ids`` (``file_type``
    matrices, see :func:`mtp_llm.gguf.draft_head.write_draft_head`). ``out_path``: a file, or a
    directory for the default name ``mtp-<stem>-<type>-v<N>.gguf`` (beside the model when None).
    """
    model_path = Path(model_path)
    n = len(ids)
    if out_path is None or Path(out_path).is_dir():
        name = draft_head_path(model_path, f"{file_type}-v{n}").name
        out_path = (model_path.parent if out_path is None else Path(out_path)) / name
    return write_draft_head(model_path, out_path, file_type, draft_vocab=ids)


def trim_embedded_head(
    model_path: str | os.PathLike[str], out_path: str | os.PathLike[str], ids: Sequence[int] | np.ndarray
) -> Path:
    """A copy of the GGUF ``model_path`` whose embedded MTP head scores the tokens ``ids``: every
    tensor as stored, plus ``blk.{i}.nextn.shared_head_head.weight`` (the head's LM matrix, the
    rows ``ids`` gathered as stored) for each head block, ``d2t`` and :data:`DRAFT_VOCAB_KEY`."""
    import gguf

    model_path = Path(model_path)
    reader = _reader(model_path)
    head_blocks, _ = head_layout(reader, model_path)
    trimmed = trimmed_lm_heads(reader, head_blocks, np.asarray(ids, dtype=np.int64))
    replaced = {name for name, *_ in trimmed}
    entries: list[StreamedTensor] = [
        (t.name, tuple(int(d) for d in reversed(t.shape)), t.tensor_type, _as_stored(t))
        for t in reader.tensors if t.name not in replaced
    ]
    out = Path(out_path)
    with written_atomically(out) as tmp:
        writer = gguf.GGUFWriter(str(tmp), str(reader.fields["general.architecture"].contents()))
        copy_metadata(reader, writer, skip=("general.architecture",))
        writer.add_uint32(DRAFT_VOCAB_KEY, len(ids))
        write_streamed(writer, entries + trimmed)
    return out


def trimmable(model_path: str | os.PathLike[str]) -> Any:
    """The open ``GGUFReader`` of a file whose MTP head can be trimmed; raises MissingMTPHeadError or
    InvalidOptionError (see :func:`mtp_llm.gguf.draft_head.head_layout`) where it cannot."""
    reader = _reader(model_path)
    head_layout(reader, Path(model_path))
    return reader


def _reader(path: str | os.PathLike[str]) -> Any:
    import gguf

    from ..errors import ModelLoadError

    try:
        return gguf.GGUFReader(str(path))
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise ModelLoadError(f"cannot read '{path}' as a GGUF file: {exc}") from exc


def _as_stored(tensor: Any) -> Any:
    return lambda: np.asarray(tensor.data)


__all__: Sequence[str] = (
    "DRAFT_VOCAB_ARCHITECTURES",
    "DRAFT_VOCAB_KEY",
    "draft_vocab_ids",
    "special_token_ids",
    "trim_embedded_head",
    "trimmable",
    "write_trimmed_head",
)
