"""Choosing a trimmed draft vocabulary: token counts from a corpus or the model's own answers.

The files are written by :mod:`mtp_llm.gguf.draft_vocab` (``docs/draft-vocab.md``)::

    ids = choose_draft_vocab("model.gguf", 8192)             # the model's own greedy answers
    write_trimmed_head("model.gguf", ids, file_type="q8_0")  # mtp-model-q8_0-v8192.gguf
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from .gguf.draft_vocab import draft_vocab_ids, special_token_ids, trim_embedded_head, trimmable, write_trimmed_head
from .model import Model

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
    from .events import TokenEvent
    from .session import MTP

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


def choose_draft_vocab(
    model_path: str | os.PathLike[str],
    n: int,
    corpus: str | os.PathLike[str] | None = None,
    *,
    n_threads: int | None = None,
) -> np.ndarray:
    """The N token ids (sorted) a trimmed head of ``model_path`` should keep: its control tokens,
    then the most frequent in ``corpus`` or in the model's own greedy answers to :data:`PROMPTS`.
    Raises where the file's head cannot be trimmed, before counting anything."""
    reader = trimmable(model_path)
    counts = token_frequencies(Model.load(model_path, load_mtp=False), corpus, n_threads=n_threads)
    return draft_vocab_ids(counts, n, special_token_ids(model_path, reader))


__all__: Sequence[str] = (
    "PROMPTS",
    "choose_draft_vocab",
    "draft_vocab_ids",
    "special_token_ids",
    "token_frequencies",
    "trim_embedded_head",
    "write_trimmed_head",
)
