"""Where mtp_llm caches what it writes or fetches (models it generates, split heads): one place,
importing nothing from the package, so any module may ask for it."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def cache_dir() -> Path:
    """``$MTP_LLM_CACHE_DIR``, else ``$XDG_CACHE_HOME/mtp_llm``, else ``~/.cache/mtp_llm``."""
    env = os.environ.get("MTP_LLM_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "mtp_llm"


def sha256_of(path: Path) -> str:
    """The sha256 of a file, read in 1 MiB blocks (cmake/fetch_llama_cpp.py has its own copy: it
    runs at configure time, before the package exists)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
