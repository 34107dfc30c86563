"""Finding the MTP head of a target that carries none (``draft_model="auto"``): by file name, confirmed by metadata.

A head file (sidecar) holds the MTP layers only. Two tools write them under different names:

* this package (``mtp-llm split``, a hub repository's convention): ``mtp-<target file name>``,
  for a split target ``mtp-<name without -0000k-of-0000N>.gguf``;
* llama.cpp's ``convert_hf_to_gguf.py --mtp``: ``mtp-<name without the size label>``
  (``mtp-Qwen3.5-F16.gguf`` beside ``Qwen3.5-9B-F16.gguf``); with ``--outfile`` any name at all.

:func:`find_head` tries those names first, then every other GGUF in the target's folder. A file
counts only when its header (read without loading any weights) says it is a head for this target:
the same architecture, hidden size, vocabulary size and trunk depth (``block_count`` minus
``nextn_predict_layers``), the same number of heads when the target declares them, head tensors
and no trunk tensors. Two such files besides the named ones raise :class:`AmbiguousDraftError`.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from . import _core
from .errors import AmbiguousDraftError, MTPError

__all__ = ["HeadSearch", "TargetFacts", "find_head", "head_mismatch", "sidecar_names"]

_SPLIT = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")
# The size label gguf's naming convention puts after the model name: 9B, 0.8B, 6.6M, 8x7B, 35B-A3B.
_SIZE_LABEL = re.compile(r"-(?:\d+x)?\d+(?:\.\d+)?[KMBT](?:-A\d+(?:\.\d+)?[KMBT])?(?=-|\.gguf$|$)", re.IGNORECASE)


def sidecar_names(target: str) -> list[str]:
    """File names a head made for ``target`` (a file name) may have, in the order they are tried:
    ``mtp-<name>``, a split target's ``mtp-<name without -0000k-of-0000N>.gguf``, and the converter's
    ``mtp-<name without its size label>``."""
    base = target.rsplit("/", 1)[-1]
    stems = [base.removesuffix(".gguf")]
    match = _SPLIT.match(base)
    if match is not None:
        stems.append(match["prefix"])
    names = [f"mtp-{stems[0]}.gguf" if base.endswith(".gguf") else f"mtp-{base}"]
    names += [f"mtp-{stem}.gguf" for stem in stems[1:]]
    for stem in stems:
        label = _SIZE_LABEL.search(stem, 1)
        if label is not None:
            names.append(f"mtp-{stem[: label.start()]}{stem[label.end():]}.gguf")
    return list(dict.fromkeys(names))


@dataclasses.dataclass(frozen=True)
class TargetFacts:
    """What a head must agree with: the target's architecture, hidden size, vocabulary size,
    trunk depth (blocks without heads) and declared head count (0: none declared)."""

    architecture: str
    n_embd: int
    n_vocab: int
    n_trunk_layers: int
    n_heads: int


@dataclasses.dataclass(frozen=True)
class HeadSearch:
    """The outcome of :func:`find_head`."""

    path: Path | None
    """The head to use, or None."""
    rejected: tuple[tuple[Path, str], ...] = ()
    """Files named like a head of the target whose metadata does not fit it, with the reason."""


def head_mismatch(path: Path, target: TargetFacts) -> str | None:
    """Why the GGUF at ``path`` is not an MTP head for ``target`` (None when it is one).
    Reads the header only: metadata and tensor names."""
    try:
        facts: dict[str, Any] = _core.inspect_gguf(str(path))
    except (MTPError, RuntimeError) as exc:
        return f"unreadable ({exc})"
    if facts["has_trunk"]:
        return "it holds trunk layers, not only a head"
    if facts["n_nextn"] <= 0 or not facts["has_mtp_tensors"]:
        return "it holds no MTP head tensors"
    depth = facts["block_count"] - facts["n_nextn"]
    for what, value, wanted in (
        ("architecture", facts["architecture"], target.architecture),
        ("hidden size", facts["n_embd"], target.n_embd),
        ("vocabulary size", facts["n_vocab"], target.n_vocab),
        ("trunk depth", depth, target.n_trunk_layers),
    ):
        if value != wanted:
            return f"its {what} is {value!r}, the target's {wanted!r}"
    if target.n_heads and facts["n_nextn"] != target.n_heads:
        return f"it has {facts['n_nextn']} MTP heads, the target declares {target.n_heads}"
    return None


def find_head(target_path: Path, target: TargetFacts, *, scan: bool = True) -> HeadSearch:
    """The MTP head for the target at ``target_path``: the first of :func:`sidecar_names` beside
    it that fits, else (with ``scan``) the one other GGUF in its folder that fits.

    Raises:
        AmbiguousDraftError: no named file fits and several other files do.
    """
    folder = target_path.parent
    rejected: list[tuple[Path, str]] = []
    tried = {target_path.name}
    for name in sidecar_names(target_path.name):
        tried.add(name)
        candidate = folder / name
        if candidate.is_file():
            problem = head_mismatch(candidate, target)
            if problem is None:
                return HeadSearch(candidate, tuple(rejected))
            rejected.append((candidate, problem))
    if not scan:
        return HeadSearch(None, tuple(rejected))
    own = _SPLIT.match(target_path.name)
    fits: list[Path] = []
    for candidate in sorted(folder.glob("*.gguf")):
        name = candidate.name
        split = _SPLIT.match(name)
        if name in tried or name.startswith(".") or not candidate.is_file():
            continue
        if split is not None and (int(split["no"]) != 1 or (own is not None and split["prefix"] == own["prefix"])):
            continue  # a later part of a split file, or another part of the target
        problem = head_mismatch(candidate, target)
        if problem is None:
            fits.append(candidate)
        elif name.lower().startswith("mtp-"):
            rejected.append((candidate, problem))
    if len(fits) > 1:
        listed = ", ".join(repr(p.name) for p in fits)
        raise AmbiguousDraftError(
            f"{len(fits)} MTP head files in {str(folder)!r} fit the trunk-only model {target_path.name!r}: {listed}. "
            f"Pick one with draft_model=Model.load({str(fits[0])!r}) (mtp-llm: --draft-model), or rename the one "
            f"to use to {sidecar_names(target_path.name)[0]!r}"
        )
    return HeadSearch(fits[0] if fits else None, tuple(rejected))
