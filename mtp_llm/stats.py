"""The speculative-decoding statistics schema: the one definition used everywhere.

The engine counts raw events (draft proposals, acceptances, verify passes,
microseconds per phase) in atomic counters; :class:`MTPStats` derives every
rate from those counts. The LangChain and LlamaIndex integrations, the CLI and
the docs all use this class and :data:`STATS_KEY`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

STATS_KEY = "mtp_stats"
"""Key under which integrations publish per-call stats (generation_info,
response_metadata, llm_output, additional_kwargs) and the name of the
custom callback / instrumentation event."""


@dataclasses.dataclass(frozen=True, slots=True)
class TimingUs:
    """Where the decode time went, in microseconds.

    ``draft``: the MTP head (drafting plus catching its KV cache up after each
    verify); ``verify``: target forward passes over ``[last, drafts...]``;
    ``sample``: target sampling and acceptance; ``ckpt``: recurrent-state
    checkpoint save/restore (hybrid models only, zero elsewhere); ``other``:
    the rest of the loop; ``total``: the whole decode window (prompt excluded).
    """

    draft: int
    verify: int
    sample: int
    ckpt: int
    other: int
    total: int


@dataclasses.dataclass(frozen=True, slots=True)
class DraftControllerEstimates:
    """What the automatic draft length (``n_draft="auto"``) has learnt so far in
    this session (docs/performance.md, "Automatic draft length")."""

    acceptance: tuple[float, ...]
    """Per draft position i: P(draft i accepted | the drafts before it were), a
    decayed average of this session's iterations."""
    streams: int
    """Concurrent streams (calls sharing the session's iterations) that ``iteration_us`` is for:
    those of the last choice. Times are kept per number of streams and of compute threads."""
    threads: int
    """Compute threads of the last choice's iterations (the session's adaptive thread count may
    lower it on a busy machine, docs/performance.md); ``iteration_us`` is for these."""
    iteration_us: tuple[float, ...]
    """Per draft length k = 0..n_draft_max: measured time of one iteration of ``streams``
    streams on ``threads`` threads (0 = not measured yet). With several streams, the times the
    choice compares: each length's cost relative to the others (measured at one moment) at the
    machine's speed of the length measured last."""
    expected_tokens_per_s: tuple[float, ...]
    """Per draft length k: expected committed tokens of one stream / iteration time (0 = not measured yet)."""
    choice: int
    """The draft length chosen last."""
    probe_interval: int
    """Plain rounds (iterations of every stream, one token each) between probes of drafting while
    plain decoding is faster, at ``streams`` concurrent streams (each number keeps its own)."""

    @classmethod
    def from_native(cls, native: Any) -> DraftControllerEstimates:
        """Read the engine's ``ControllerEstimates`` field by field (the fields share their names)."""
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            value = getattr(native, field.name)
            values[field.name] = tuple(float(x) for x in value) if isinstance(value, list) else int(value)
        return cls(**values)


@dataclasses.dataclass(frozen=True, slots=True)
class MTPStats:
    """A snapshot of speculative-decoding statistics.

    Counts are cumulative over the calls they cover (a session's lifetime for
    :meth:`MTP.stats`, one call for :attr:`MTP.last_stats` and the integrations).
    """

    iters: int
    """Target verify passes, replays included."""
    verify_batches: int
    """Target verify decodes. Each verifies every running call of the session at once
    (``n_parallel``): for a call this equals ``iters``, for a session's stats ``iters /
    verify_batches`` is the mean number of calls per decode (``mean_calls_per_batch``)."""
    mean_calls_per_batch: float
    """iters / verify_batches: how many calls shared each verify decode (1.0 alone)."""
    padding_rows: int
    """Rows added to shared decodes (target verify and MTP head) so that each stays one pass
    over the weights: llama.cpp splits calls in non-adjacent slots, or with different row
    counts, into a pass each. A call's are those of the decodes it shared; a session's count
    each decode once."""
    replays: int
    """Verify passes that re-checked already accepted tokens after a checkpoint
    restore (hybrid models without recurrent rollback); never counted as drafts."""
    drafts_generated: int
    """Draft tokens proposed: by the MTP head, and forced by a grammar (``drafts_forced``)."""
    drafts_accepted: int
    """Draft tokens the target accepted (replays excluded)."""
    acceptance_rate: float
    """drafts_accepted / drafts_generated (0.0 when nothing was drafted)."""
    drafts_forced: int
    """Draft tokens taken from text the call's grammar forced, without a head pass
    (``SessionOptions.grammar_drafts``); included in ``drafts_generated``."""
    drafts_forced_accepted: int
    """Forced draft tokens the target accepted (included in ``drafts_accepted``)."""
    head_acceptance_rate: float
    """The MTP head's own drafts: (drafts_accepted - drafts_forced_accepted) /
    (drafts_generated - drafts_forced) (0.0 when the head drafted nothing)."""
    tokens_emitted: int
    """Tokens returned to the caller (end-of-generation token included)."""
    tokens_undrafted: int
    """Tokens committed by verify passes that drafted nothing (plain decoding)."""
    undrafted_share: float
    """tokens_undrafted / tokens_emitted: the share decoded without drafting."""
    draft_length_counts: tuple[int, ...]
    """Per draft length k = 0..n_draft: verify passes that drafted exactly k tokens
    (replays excluded); with ``n_draft="auto"`` the distribution of chosen lengths."""
    tokens_per_sec: float
    """tokens_emitted over the decode window (timing_us.total)."""
    timing_us: TimingUs
    n_draft: int
    """Maximum draft length in effect."""
    mean_accepted_length: float
    """Tokens committed per verify pass, plain passes included, replays not: 1 + drafts_accepted /
    (iters - replays). Equals 1 + acceptance_rate * n_draft when every pass drafts n_draft tokens."""
    acceptance_rate_per_position: tuple[float, ...]
    """Per draft position i: acceptances at i / drafts proposed at i. A draft at i is
    accepted only if the drafts before it were, so this reads P(first i+1 drafts all
    accepted), about a^(i+1) for a per-position rate a; the rate given the previous
    position is the ratio of neighbours (``mtp-llm bench`` prints both)."""
    prompt_tokens: int
    prompt_tokens_cached: int
    """Prompt tokens reused from what the contexts held (``cache_prompt``): not processed again."""
    prompt_tokens_processed: int
    """Prompt tokens processed: prompt_tokens - prompt_tokens_cached."""
    prompt_us: int
    """Prompt-processing time in microseconds."""
    prompt_tokens_per_sec: float
    """Prompt tokens decoded in ``prompt_us`` per second; a prompt's last token is decoded with the
    first step, not here (0.0 when nothing else was left to decode, e.g. a fully cached prompt)."""
    time_to_first_token_us: int
    """From the start of the latest call to its first generated token."""
    generations: int
    """Generation calls covered by this snapshot."""
    draft_controller: DraftControllerEstimates | None = None
    """The automatic draft length's current estimates (None where the session cannot draft)."""
    draft_vocab_size: int = 0
    """Tokens the MTP head scored per draft step: the model's vocabulary size for a full head,
    fewer for a trimmed one (``docs/draft-vocab.md``), 0 for plain decoding."""

    @classmethod
    def from_counters(cls, c: Mapping[str, Any]) -> MTPStats:
        """Derive the stats from the engine's raw counters."""
        generated = int(c["drafts_generated"])
        accepted = int(c["drafts_accepted"])
        forced = int(c["drafts_forced"])
        forced_accepted = int(c["drafts_forced_accepted"])
        total_us = int(c["t_total_us"])
        named = int(c["t_draft_us"]) + int(c["t_verify_us"]) + int(c["t_sample_us"]) + int(c["t_ckpt_us"])
        verify_passes = int(c["iters"]) - int(c["replays"])
        prompt_us = int(c["t_prompt_us"])
        processed = int(c["prompt_tokens"]) - int(c["prompt_tokens_cached"])
        prompt_decoded = processed - int(c["generations"])  # each call's last prompt token: its first step
        drafted_at = [int(x) for x in c["drafted_at"]]
        length_counts = [verify_passes - (drafted_at[0] if drafted_at else 0)] + [
            drafted_at[k] - (drafted_at[k + 1] if k + 1 < len(drafted_at) else 0) for k in range(len(drafted_at))
        ]
        emitted = int(c["tokens_emitted"])
        undrafted = int(c["tokens_undrafted"])
        controller = c.get("draft_controller")
        return cls(
            iters=int(c["iters"]),
            verify_batches=int(c["verify_batches"]),
            mean_calls_per_batch=int(c["iters"]) / int(c["verify_batches"]) if int(c["verify_batches"]) else 0.0,
            padding_rows=int(c["padding_rows"]),
            replays=int(c["replays"]),
            drafts_generated=generated,
            drafts_accepted=accepted,
            acceptance_rate=accepted / generated if generated else 0.0,
            drafts_forced=forced,
            drafts_forced_accepted=forced_accepted,
            head_acceptance_rate=(accepted - forced_accepted) / (generated - forced) if generated > forced else 0.0,
            tokens_emitted=emitted,
            tokens_undrafted=undrafted,
            undrafted_share=undrafted / emitted if emitted else 0.0,
            draft_length_counts=tuple(length_counts),
            tokens_per_sec=int(c["tokens_emitted"]) * 1e6 / total_us if total_us else 0.0,
            timing_us=TimingUs(
                draft=int(c["t_draft_us"]),
                verify=int(c["t_verify_us"]),
                sample=int(c["t_sample_us"]),
                ckpt=int(c["t_ckpt_us"]),
                other=max(0, total_us - named),
                total=total_us,
            ),
            n_draft=int(c["n_draft"]),
            mean_accepted_length=1.0 + accepted / verify_passes if verify_passes else 0.0,
            acceptance_rate_per_position=tuple(
                a / d if d else 0.0 for a, d in zip(c["accepted_at"], c["drafted_at"])
            ),
            prompt_tokens=int(c["prompt_tokens"]),
            prompt_tokens_cached=int(c["prompt_tokens_cached"]),
            prompt_tokens_processed=processed,
            prompt_us=prompt_us,
            prompt_tokens_per_sec=prompt_decoded * 1e6 / prompt_us if prompt_us and prompt_decoded > 0 else 0.0,
            time_to_first_token_us=int(c["t_first_token_us"]),
            generations=int(c["generations"]),
            draft_controller=DraftControllerEstimates.from_native(controller) if controller else None,
            draft_vocab_size=int(c.get("draft_vocab_size", 0)),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (nested ``timing_us``, lists for tuples)."""
        d = dataclasses.asdict(self)
        d["acceptance_rate_per_position"] = list(self.acceptance_rate_per_position)
        d["draft_length_counts"] = list(self.draft_length_counts)
        if self.draft_controller is not None:
            d["draft_controller"] = {
                k: list(v) if isinstance(v, tuple) else v for k, v in d["draft_controller"].items()
            }
        return d

    def summary(self) -> str:
        """One human-readable line, as printed by the CLI."""
        positions = ", ".join(f"{r:.2f}" for r in self.acceptance_rate_per_position)
        return (
            f"tokens={self.tokens_emitted} tok/s={self.tokens_per_sec:.1f} "
            f"acceptance={self.acceptance_rate:.3f} ({self.drafts_accepted}/{self.drafts_generated}) "
            f"forced={self.drafts_forced_accepted}/{self.drafts_forced} "
            f"per-position=[{positions}] mean_accepted_length={self.mean_accepted_length:.2f} "
            f"n_draft={self.n_draft} lengths={list(self.draft_length_counts)} "
            f"undrafted={self.undrafted_share:.2f} iters={self.iters} replays={self.replays} "
            f"prompt={self.prompt_tokens} tok ({self.prompt_tokens_cached} cached) in {self.prompt_us / 1000:.1f} ms "
            f"ttft={self.time_to_first_token_us / 1000:.1f} ms "
            f"timing_ms(draft={self.timing_us.draft / 1000:.1f} verify={self.timing_us.verify / 1000:.1f} "
            f"sample={self.timing_us.sample / 1000:.1f} ckpt={self.timing_us.ckpt / 1000:.1f} "
            f"other={self.timing_us.other / 1000:.1f} total={self.timing_us.total / 1000:.1f})"
        )
