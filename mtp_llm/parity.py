"""Check an exported model against its reference implementation, through llama.cpp itself.

The acceptance numbers of a trained MTP model mean something only if llama.cpp
computes what the training code computed. :func:`forward_with_head` returns
llama.cpp's every-position logits and hidden states of the trunk and of the MTP
head; :func:`compare_with_reference` compares them with arrays saved by the
training code (``tools/train_default_model/export.py`` writes
``mtp-llm-default.reference.npz`` next to the model).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from . import _core
from .model import Model

# Reference array name -> llama.cpp output name.
REFERENCE_KEYS = {
    "trunk_logits": "trunk_logits",
    "trunk_h": "trunk_hidden",
    "mtp_step1_logits": "head_logits",
    "mtp_step1_h": "head_hidden",
}


def forward_with_head(
    model: Model, tokens: Sequence[int], *, head: Model | None = None, n_threads: int | None = None
) -> dict[str, np.ndarray]:
    """llama.cpp's outputs at every position: ``trunk_logits``, ``trunk_hidden`` (the
    post-norm state the head consumes), ``head_logits`` and ``head_hidden``. Row i of
    the head pairs token i with the trunk's hidden state at i-1 (zeros at i=0), as
    draft-mtp does, so it predicts token i+2."""
    head_model = head or model
    return _core.internals.forward_with_head(model._native, head_model._native, list(tokens), n_threads or 0)


def trunk_hidden_states(
    model: Model, sequences: Sequence[Sequence[int]], *, n_threads: int | None = None
) -> list[np.ndarray]:
    """The trunk's post-norm hidden state (what an MTP head consumes) at every position of each
    sequence, ``[len(seq), n_embd]`` float32 each; one prompt pass per sequence, no logits."""
    return _core.internals.trunk_hidden_states(model._native, [list(s) for s in sequences], n_threads or 0)


def compare_with_reference(
    model_path: str | os.PathLike[str],
    reference: str | os.PathLike[str],
    *,
    sidecar: str | os.PathLike[str] | None = None,
    n_threads: int | None = 1,
) -> dict[str, float]:
    """Max absolute difference per output between llama.cpp and the saved reference."""
    ref = np.load(Path(reference))
    model = Model.load(model_path)
    head = Model.load(sidecar) if sidecar else None
    out = forward_with_head(model, ref["tokens"].tolist(), head=head, n_threads=n_threads)
    return {key: float(np.abs(out[name] - ref[key]).max()) for key, name in REFERENCE_KEYS.items()}
