"""What the GGUF writers share: the byte-level BPE vocabulary and its ``tokenizer.*`` keys,
the tensor shape check, and the final write of a ``gguf.GGUFWriter``.

:func:`tiny_vocab` is the vocabulary of every model the project writes (the tiny test
models of :mod:`mtp_llm.gguf.tiny_models` and the hybrid and glm4 writers' defaults).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

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


def finish_file(writer: Any) -> None:
    """Write header, metadata and tensors of a ``gguf.GGUFWriter`` and close it."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


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
