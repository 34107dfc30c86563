"""Typed events yielded by :meth:`MTP.stream_events`."""

from __future__ import annotations

import dataclasses
import math

from .stats import MTPStats


@dataclasses.dataclass(frozen=True, slots=True)
class TokenEvent:
    """One generated token. ``text`` is valid UTF-8 and may be empty while the
    bytes of a split character or a possible stop string are held back; the
    texts of all token events join to the full output."""

    id: int
    text: str
    logprob: float | None = None
    """Log-probability of the token under the target model, when the call asked for
    ``logprobs`` (:attr:`GenerationOptions.logprobs`)."""
    top_logprobs: tuple[tuple[int, float], ...] = ()
    """(token id, log-probability) of the ``top_logprobs`` most likely tokens at this
    position, most likely first."""


@dataclasses.dataclass(frozen=True, slots=True)
class StatsEvent:
    """Stats of the running call, every ``emit_stats_every`` tokens."""

    stats: MTPStats


@dataclasses.dataclass(frozen=True, slots=True)
class EogEvent:
    """The model emitted an end-of-generation token (also sent as a TokenEvent)."""

    token: int


@dataclasses.dataclass(frozen=True, slots=True)
class DoneEvent:
    """The call finished; always the last event. ``finish_reason`` is
    ``"eog"``, ``"length"`` (max_tokens) or ``"stop"`` (a stop string)."""

    stats: MTPStats
    finish_reason: str


Event = TokenEvent | StatsEvent | EogEvent | DoneEvent


@dataclasses.dataclass(frozen=True, slots=True)
class TextScore:
    """How likely the model finds a given text (:meth:`MTP.score`): per token, the natural
    log-probability given every token before it, as llama-perplexity computes it."""

    tokens: tuple[int, ...]
    """The text's tokens (the first has no log-probability: nothing comes before it)."""
    logprobs: tuple[float, ...]
    """log P(tokens[i + 1] | tokens[:i + 1]) for each i."""

    @property
    def total(self) -> float:
        """Sum of the log-probabilities: log P(text | its first token)."""
        return float(sum(self.logprobs))

    @property
    def perplexity(self) -> float:
        """exp(-mean log-probability)."""
        return math.exp(-self.total / len(self.logprobs))
