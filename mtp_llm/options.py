"""Per-call generation options, validated once and shared by every entry point."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import InvalidOptionError

DEFAULT_SEED = 0xFFFFFFFF  # llama.cpp's LLAMA_DEFAULT_SEED: a random seed per call


@dataclasses.dataclass(frozen=True, slots=True)
class GenerationOptions:
    """Options of one generation call (the sampler defaults are llama.cpp's)."""

    max_tokens: int = 256
    """Maximum number of tokens to generate."""
    emit_stats_every: int = 0
    """Emit a StatsEvent every N tokens (0 = only at the end)."""
    timeout: float | None = None
    """Seconds before the generation is stopped with GenerationTimeoutError."""
    stop: tuple[str, ...] = ()
    """Stop strings: generation ends when one appears; it is never emitted."""
    temp: float = 0.8
    """Sampling temperature; 0 samples greedily."""
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int = DEFAULT_SEED
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    penalty_last_n: int = 64
    grammar: str | None = None
    """A GBNF grammar that constrains the output."""
    n_draft: int | None = None
    """Draft length for this call (<= the session's; 0 = plain decoding)."""

    @classmethod
    def from_kwargs(cls, base: GenerationOptions | None = None, /, **kwargs: Any) -> GenerationOptions:
        """Build options from keyword arguments on top of ``base``, checking names and types."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - set(fields))
        if unknown:
            raise InvalidOptionError(
                f"unknown generation option(s) {unknown}; valid options: {sorted(fields)}"
            )
        values = {k: v for k, v in kwargs.items() if v is not None or k in ("timeout", "grammar", "n_draft")}
        merged = dataclasses.replace(base or cls(), **{k: _coerce(k, v) for k, v in values.items()})
        merged._check()
        return merged

    def _check(self) -> None:
        if self.max_tokens < 1:
            raise InvalidOptionError(f"max_tokens must be at least 1 (got {self.max_tokens})")
        if self.emit_stats_every < 0:
            raise InvalidOptionError("emit_stats_every must be >= 0 (0 = off)")
        if self.timeout is not None and not (self.timeout > 0 and math.isfinite(self.timeout)):
            raise InvalidOptionError(f"timeout must be a positive number of seconds or None (got {self.timeout})")
        if not 0 <= self.seed <= 0xFFFFFFFF:
            raise InvalidOptionError("seed must be in [0, 2**32 - 1]")
        if self.grammar is not None and not self.grammar.strip():
            raise InvalidOptionError("grammar must not be empty (pass None for no grammar)")
        if self.n_draft is not None and self.n_draft < 0:
            raise InvalidOptionError(f"n_draft must be >= 0 (got {self.n_draft})")


_INT_FIELDS = {"max_tokens", "emit_stats_every", "top_k", "seed", "penalty_last_n", "n_draft"}
_FLOAT_FIELDS = {"temp", "top_p", "min_p", "repeat_penalty", "frequency_penalty", "presence_penalty", "timeout"}


def _coerce(name: str, value: Any) -> Any:
    if value is None:
        return None
    if name in _INT_FIELDS:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidOptionError(f"{name} must be an integer (got {value!r})")
        return value
    if name in _FLOAT_FIELDS:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidOptionError(f"{name} must be a number (got {value!r})")
        value = float(value)
        if math.isnan(value):
            raise InvalidOptionError(f"{name} must not be NaN")
        return value
    if name == "stop":
        return normalize_stop(value)
    if name == "grammar":
        if not isinstance(value, str):
            raise InvalidOptionError(f"grammar must be a GBNF string (got {type(value).__name__})")
        return value
    return value


def normalize_stop(stop: str | Sequence[str] | None) -> tuple[str, ...]:
    """Accept one stop string or a sequence of them; reject empty strings."""
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, Sequence) or not all(isinstance(s, str) for s in stop):
        raise InvalidOptionError(f"stop must be a string or a list of strings (got {stop!r})")
    if any(s == "" for s in stop):
        raise InvalidOptionError("stop strings must not be empty")
    return tuple(dict.fromkeys(stop))


def split_options(kwargs: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split keyword arguments into generation options and the rest."""
    names = {f.name for f in dataclasses.fields(GenerationOptions)}
    gen = {k: v for k, v in kwargs.items() if k in names}
    rest = {k: v for k, v in kwargs.items() if k not in names}
    return gen, rest
