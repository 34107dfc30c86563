"""Trimmed draft vocabularies: an MTP head that scores only the N tokens that matter.

A draft pass's largest cost is usually the head's LM matrix (``n_vocab`` rows). A trimmed head
keeps N of its rows (the N most frequent tokens, plus every control token the chat formats
need) and stores ``d2t`` (I64, [N]): the target id of each row. llama.cpp's MTP graphs
(patch 0007 for ``llama``, ``hy_v3``, ``qwen35``, ``qwen35moe``) multiply by the N-row matrix and
scatter the N logits into a full row of ``-inf``, so drafts are ids of the full vocabulary and
the target verifies over the full vocabulary: output is unchanged, only acceptance may drop
(a token outside the N is never drafted). ``docs/draft-vocab.md`` says how to choose N.

* :func:`token_frequencies`: token counts of a corpus (tokenized with the model) or, by
  default, of the model's own greedy answers to :data:`PROMPTS`;
* :func:`draft_vocab_ids`: the sorted token set of size N from counts;
* :func:`write_trimmed_head`: an ``mtp-`` sidecar with a trimmed head (``mtp-llm draft-head
  MODEL --draft-vocab N``);
* :func:`trim_embedded_head`: a copy of a whole GGUF whose embedded head is trimmed (every other
  tensor byte for byte).

Rows are gathered as stored (a quantized row is whole blocks), so row ``i`` of a trimmed head
is exactly row ``d2t[i]`` of the full one.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .common import StreamedTensor, copy_metadata, write_streamed, written_atomically

if TYPE_CHECKING:
    from ..model import Model

DRAFT_VOCAB_ARCHITECTURES: tuple[str, ...] = ("hy_v3", "llama", "qwen35", "qwen35moe")
"""Architectures whose MTP graph takes a trimmed head (patch 0007)."""

DRAFT_VOCAB_KEY = "mtp_llm.draft_vocab_size"
"""Metadata key holding N in a file with a trimmed head (the ``d2t`` tensor is authoritative)."""

PROMPTS: tuple[str, ...] = (
    "Write a short story about a lighthouse keeper.",
    "Explain how a refrigerator works.",
    "What are the main causes of the French Revolution?",
    "Write a Python function that checks whether a number is prime.",
    "Give me three tips for learning a new language.",
    "Summarise the plot of Romeo and Juliet.",
    "How do vaccines train the immune system?",
    "Write a haiku about autumn rain.",
    "What is the difference between a list and a tuple in Python?",
    "Describe the water cycle to a ten-year-old.",
    "Write an email asking a colleague to review a document.",
    "What should I pack for a week of hiking?",
    "Explain recursion with an example.",
    "Why is the sky blue?",
    "List the planets of the solar system with one fact each.",
    "How do I make a simple tomato sauce?",
    "Write a SQL query that counts orders per customer.",
    "What is photosynthesis?",
    "Give a short history of the printing press.",
    "Translate 'good morning, how are you?' into French and Spanish.",
    "What are the pros and cons of remote work?",
    "Write a limerick about a cat.",
    "How does compound interest work?",
    "Explain what an API is.",
)
"""The built-in prompt set for :func:`token_frequencies` without a corpus (chat-rendered when
the model has a chat template)."""

_CONTROL, _USER_DEFINED = 3, 4  # llama.cpp token types kept in every trimmed head
_SPECIAL_ID_KEYS = ("bos", "eos", "eot", "eom", "sep", "pad", "unknown")


def token_frequencies(
    model: Model,
    corpus: str | os.PathLike[str] | None = None,
    *,
    prompts: Sequence[str] = PROMPTS,
    max_tokens: int = 96,
    n_threads: int | None = None,
) -> np.ndarray:
    """How often each token id occurs (int64, ``[n_vocab]``).

    ``corpus``: a UTF-8 text file, tokenized with ``model`` a paragraph chunk at a time.
    Without one: the model's own greedy answers to ``prompts`` (``max_tokens`` each, plain
    decoding, chat-rendered when the model has a template), prompts and answers counted.
    """
    counts = np.zeros(model.n_vocab, dtype=np.int64)
    if corpus is not None:
        for chunk in _chunks(Path(corpus)):
            ids = model.tokenize(chunk, add_special=False, parse_special=True)
            counts += np.bincount(np.asarray(ids, dtype=np.int64), minlength=model.n_vocab)
        return counts
    from ..events import TokenEvent
    from ..session import MTP

    session = MTP(model, n_draft=0, n_ctx=1024 + max_tokens, n_threads=n_threads)
    try:
        for prompt in prompts:
            text = model.apply_chat_template([("user", prompt)]) if model.chat_template else prompt
            ids = model.tokenize(text, add_special=True, parse_special=True)
            ids += [e.id for e in session.stream_events(ids, max_tokens=max_tokens, temp=0) if isinstance(e, TokenEvent)]
            counts += np.bincount(np.asarray(ids, dtype=np.int64), minlength=model.n_vocab)
    finally:
        session.close()
    return counts


def _chunks(path: Path, size: int = 1 << 16) -> Iterable[str]:
    """The text of ``path`` in pieces of about ``size`` characters, cut at line ends."""
    buf: list[str] = []
    n = 0
    with path.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            buf.append(line)
            n += len(line)
            if n >= size:
                yield "".join(buf)
                buf, n = [], 0
    if buf:
        yield "".join(buf)


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
    n: int,
    out_path: str | os.PathLike[str] | None = None,
    file_type: str = "q8_0",
    *,
    corpus: str | os.PathLike[str] | None = None,
    ids: Sequence[int] | np.ndarray | None = None,
    n_threads: int | None = None,
) -> Path:
    """Write ``model_path``'s MTP head as a sidecar that scores ``n`` tokens (``file_type``
    matrices, see :func:`mtp_llm.gguf.draft_head.write_draft_head`).

    ``ids``: the token set (else chosen by :func:`draft_vocab_ids` from :func:`token_frequencies`
    of ``corpus`` or of the model's own generations; loading the model for that needs the
    file to be a whole model, not a sidecar). Default path: ``mtp-<stem>-<type>-v<n>.gguf``.
    """
    from .draft_head import draft_head_path, write_draft_head

    model_path = Path(model_path)
    if ids is None:
        reader = _reader(model_path)
        head_layout(reader, model_path)  # fail before counting tokens
        ids = _choose(model_path, n, corpus, n_threads, reader)
    if out_path is None or Path(out_path).is_dir():
        name = draft_head_path(model_path, f"{file_type}-v{n}").name
        out_path = (model_path.parent if out_path is None else Path(out_path)) / name
    return write_draft_head(model_path, out_path, file_type, draft_vocab=ids)


def trim_embedded_head(
    model_path: str | os.PathLike[str],
    out_path: str | os.PathLike[str],
    n: int,
    *,
    corpus: str | os.PathLike[str] | None = None,
    ids: Sequence[int] | np.ndarray | None = None,
    n_threads: int | None = None,
) -> Path:
    """A copy of the GGUF ``model_path`` whose embedded MTP head scores ``n`` tokens: every
    tensor as stored, plus ``blk.{i}.nextn.shared_head_head.weight`` (the head's LM matrix, its
    ``n`` rows gathered as stored) for each head block, ``d2t`` and :data:`DRAFT_VOCAB_KEY`."""
    import gguf

    model_path = Path(model_path)
    reader = _reader(model_path)
    head_blocks, _ = head_layout(reader, model_path)
    if ids is None:
        ids = _choose(model_path, n, corpus, n_threads, reader)
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


def _choose(
    model_path: Path, n: int, corpus: str | os.PathLike[str] | None, n_threads: int | None, reader: Any
) -> np.ndarray:
    from ..model import Model

    model = Model.load(model_path, load_mtp=False)
    counts = token_frequencies(model, corpus, n_threads=n_threads)
    return draft_vocab_ids(counts, n, special_token_ids(model_path, reader))


def _reader(path: str | os.PathLike[str]) -> Any:
    import gguf

    from ..errors import ModelLoadError

    try:
        return gguf.GGUFReader(str(path))
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise ModelLoadError(f"cannot read '{path}' as a GGUF file: {exc}") from exc


def _as_stored(tensor: Any) -> Any:
    return lambda: np.asarray(tensor.data)


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
    "DRAFT_VOCAB_ARCHITECTURES",
    "DRAFT_VOCAB_KEY",
    "PROMPTS",
    "draft_vocab_ids",
    "special_token_ids",
    "token_frequencies",
    "trim_embedded_head",
    "write_trimmed_head",
)
