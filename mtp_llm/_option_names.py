"""Refusing an option that does not exist with the name of the one that does.

Users bring option names from Ollama, llama.cpp, transformers and LlamaIndex's other LLMs
(``num_predict``, ``n_predict``, ``num_ctx``, ...), and make typos: every constructor and
per-call check raises :class:`~mtp_llm.InvalidOptionError` through :func:`unknown_option_error`,
which names the closest real option.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable

from .errors import InvalidOptionError

__all__ = ["NO_EQUIVALENT", "OTHER_NAMES", "closest_option", "unknown_option_error"]

OTHER_NAMES: dict[str, tuple[str, str]] = {
    "num_predict": ("max_tokens", "Ollama"),
    "n_predict": ("max_tokens", "llama.cpp"),
    "max_new_tokens": ("max_tokens", "transformers"),
    "num_output": ("max_tokens", "LlamaIndex"),
    "num_ctx": ("n_ctx", "Ollama"),
    "context_window": ("n_ctx", "LlamaIndex"),
    "context_length": ("n_ctx", "llama.cpp's GGUF metadata"),
    "num_thread": ("n_threads", "Ollama"),
    "num_gpu": ("n_gpu_layers", "Ollama"),
    "repeat_last_n": ("penalty_last_n", "Ollama"),
    "temp": ("temperature", "llama.cpp"),
    "stop_sequences": ("stop", "Anthropic"),
    "draft_max": ("n_draft_max", "llama-server"),
    "model_file": ("model_path", "llama-cpp-python"),
    "model": ("model_path", "Ollama"),
}
"""Another project's option name -> (mtp_llm's name, whose name it is)."""

NO_EQUIVALENT: dict[str, str] = {
    "max_retries": "a local generation has no transient failure to retry: leave it out",
    "base_url": "the model runs in this process, there is no server to point at (rpc_servers= offloads layers)",
    "api_key": "the model runs in this process: no key is needed",
    "model_kwargs": "pass each option by its own name",
}
"""Options of remote-model integrations that mean nothing here -> why and what to do."""


def closest_option(name: str, valid: Collection[str]) -> str | None:
    """The valid option ``name`` most likely meant: its equivalent here, else the closest spelling."""
    known = OTHER_NAMES.get(name)
    if known is not None and known[0] in valid:
        return known[0]
    close = difflib.get_close_matches(name, list(valid), n=1, cutoff=0.75)
    return close[0] if close else None


def _hint(name: str, valid: Collection[str]) -> str:
    if name in NO_EQUIVALENT:
        return f"{name!r} ({NO_EQUIVALENT[name]})"
    meant = closest_option(name, valid)
    if meant is None:
        return f"{name!r} (no option of that name)"
    known = OTHER_NAMES.get(name)
    if known is not None and known[0] == meant:
        return f"{name!r} ({known[1]}'s name): use {meant}"
    return f"{name!r}: did you mean {meant}"


def unknown_option_error(where: str, unknown: Iterable[str], valid: Collection[str]) -> InvalidOptionError:
    """The error for options ``unknown`` given to ``where`` (e.g. "ChatMTP()"), naming for each
    the real option meant, and where the valid ones are listed."""
    names = sorted(unknown)
    hints = "; ".join(_hint(name, valid) for name in names)
    plural = "s" if len(names) > 1 else ""
    return InvalidOptionError(f"{where} got unknown option{plural} {hints}. Valid options: {', '.join(sorted(valid))}")
