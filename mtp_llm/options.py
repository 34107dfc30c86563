"""Session and per-call options: the one Python definition of each.

:class:`SessionOptions` (what a session is created with) and
:class:`GenerationOptions` (what one generation call runs with) validate
themselves on construction, so an instance is always valid, and cross into the
engine by field name (:meth:`~SessionOptions.to_native`,
:meth:`~GenerationOptions.to_native`): every field that is not Python-only has a
field of the same name in the native ``ContextOptions`` / ``GenerateOptions``
(or its ``sampling`` part), and ``None`` crosses as "unset".
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import math
import os
import textwrap
import warnings
import typing
from collections.abc import Sequence
from typing import Any, ClassVar, Literal, Union

from . import _core
from ._option_names import unknown_option_error
from .errors import InvalidOptionError

DEFAULT_SEED = 0xFFFFFFFF  # llama.cpp's LLAMA_DEFAULT_SEED: a random seed per call

ROLLBACK_MODES: tuple[str, ...] = tuple(_core.ROLLBACK_MODES)
"""Values of :attr:`SessionOptions.rollback` (the engine's ``kRollbackModes``)."""
MAX_DRAFT: int = int(_core.MAX_DRAFT_POSITIONS)
"""The engine's longest draft (``kMaxDraftPositions``)."""
MAX_PARALLEL: int = int(_core.MAX_PARALLEL)
"""Most slots of a session (``kMaxParallel``, llama.cpp's ``LLAMA_MAX_SEQ``)."""
MAX_TOP_LOGPROBS: int = int(_core.MAX_TOP_LOGPROBS)
"""Most alternatives ``top_logprobs`` may ask for (the engine's ``kMaxTopLogprobs``)."""

def option(
    default: Any,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    choices: Sequence[str] | None = None,
    attribute: str | None = None,
) -> Any:
    """A dataclass field with its bounds (read by :func:`option_specs`: the integrations' fields,
    the CLI's flags and :meth:`SessionOptions.__post_init__` check them)."""
    metadata: dict[str, Any] = {"ge": ge, "gt": gt, "le": le, "choices": tuple(choices) if choices is not None else None}
    if attribute is not None:
        metadata["attribute"] = attribute
    return dataclasses.field(default=default, metadata=metadata)


DraftLength = Union[int, Literal["auto"]]
"""A draft length: tokens per iteration (0 = plain decoding) or "auto"."""
CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1")


@dataclasses.dataclass(frozen=True, slots=True)
class SessionOptions:
    """How a session's contexts are created (the keyword arguments of :class:`mtp_llm.MTP`)."""

    n_draft: DraftLength = "auto"
    """Draft tokens per iteration: "auto" picks each iteration's length (0 to
    ``n_draft_max``) from this session's measured costs and acceptance, so that
    MTP is used only where it is faster than plain decoding; an integer fixes
    the longest draft; 0 = plain decoding."""
    n_draft_max: int = option(4, ge=1, le=MAX_DRAFT)
    """Longest draft of ``n_draft="auto"``."""
    p_min: float = option(0.0, ge=0.0, le=1.0)
    """Stop a draft at a token whose probability among the head's top 10 is below
    this (llama.cpp's draft p_min); 0 = never. Fixed and automatic lengths alike."""
    n_ctx: int = option(2048, ge=256)
    """Context size of the target and MTP contexts, shared by the ``n_parallel`` slots (each
    holds ``n_ctx // n_parallel`` tokens, as llama-server's ``-c`` with ``-np``; at least 256)."""
    n_batch: int = option(512, ge=2)
    """Maximum tokens per decode call (prompt chunk size)."""
    n_threads: int | None = option(None, ge=1)
    """Decode threads (None = all cores)."""
    n_threads_batch: int | None = option(None, ge=1)
    """Prompt/verify threads (None = ``n_threads``)."""
    adaptive_threads: bool = True
    """Use fewer compute threads while the machine is busy: ggml's threads wait for each other
    at every step, so one descheduled by another process stalls the rest (a 2-thread decode
    beside one busy process ran 7x slower than 1 thread on a 2-core machine). The session times
    its decodes, tries n_threads - 1, half and 1 in short probes, and keeps the fastest; on a quiet
    machine it stays at ``n_threads``. Output does not depend on the thread count."""
    flash_attn: bool | None = None
    """None = auto: on for a CPU-only build (the only attention path there that keeps
    greedy MTP bit-identical to plain decoding), llama.cpp's choice where a GPU backend
    exists or the V cache is quantized; True/False to force (False can be faster on
    models with very small heads, and loses the bit-for-bit guarantee)."""
    type_k: str | None = option(None, choices=CACHE_TYPES)
    """K cache type of both contexts ("f16", "q8_0", ...; None = f16)."""
    type_v: str | None = option(None, choices=CACHE_TYPES)
    """V cache type of both contexts."""
    offload_kqv: bool = True
    """Keep the KV cache and attention on the GPU backend."""
    rollback: str = option("auto", choices=ROLLBACK_MODES)
    """Hybrid (recurrent) targets: "rs" rolls recurrent state back in place,
    "checkpoint" saves/restores it each round; "auto" = "rs"."""
    cache_prompt: bool = True
    """Keep what the contexts hold after a call and reuse the longest common token prefix
    of the next prompt (target and MTP head alike): a chat or agent loop that re-sends its
    history processes only what is new."""
    cache_size_mb: float = option(256.0, ge=0.0)
    """Memory for saved states of other conversations (an LRU): before a call replaces
    most of what the contexts hold, their state is saved, and a later call that shares
    more with a saved state than with the current one restores it. A saved state takes
    the KV cache of its tokens in both contexts (llama.cpp's sequence state). 0 = keep
    only the current conversation."""
    fuse_catch_up: bool = True
    """Decode the MTP head's catch-up on the accepted tokens together with its
    first draft step (mtp_llm's own driver: one head decode less per iteration)
    where it applies: single-head models whose caches roll back in place. False,
    or elsewhere: llama.cpp's common_speculative draft-mtp driver."""
    grammar_drafts: bool = True
    """Grammar-aware drafting under a call's grammar (``grammar``, a JSON schema, a forced tool
    call): where the grammar admits only one continuation for the next characters (keys,
    punctuation, the rest of an enum value), those characters are drafted without a head pass
    (jump-forward as drafts; up to 7 a pass whatever ``n_draft``, which bounds the head's
    drafts), spelt as the model writes them (learnt per session from the drafts it rejects);
    elsewhere the head drafts among the tokens the grammar allows, and text forced after its
    draft extends it. The target verifies every draft as usual: output is unchanged. With the
    fused driver (``fuse_catch_up``); counted in ``drafts_forced``."""
    n_parallel: int = option(1, ge=1, le=MAX_PARALLEL)
    """Generations that run at once on this session (slots): each call takes a free slot
    (the one whose cached prefix matches its prompt best) and every step drafts and
    verifies all running calls in shared batches; more calls wait their turn. Between 1
    and 256, with at least 256 tokens of ``n_ctx`` per slot."""

    def __post_init__(self) -> None:
        _set(self, "n_draft", draft_length("n_draft", self.n_draft))
        for name in ("n_draft_max", "n_ctx", "n_batch", "n_parallel"):
            _set(self, name, _int(name, getattr(self, name)))
        _check_bounds(self, "n_draft_max")
        _set(self, "p_min", probability("p_min", self.p_min))
        size = self.cache_size_mb
        if isinstance(size, bool) or not isinstance(size, (int, float)) or not 0 <= size < math.inf:
            raise InvalidOptionError(
                f"cache_size_mb must be a number of megabytes >= 0 (0 = keep only the current conversation; got {size!r})"
            )
        _set(self, "cache_size_mb", float(size))
        for name in ("n_threads", "n_threads_batch"):
            value = getattr(self, name)
            if value is not None and (_is_not_int(value) or value < 1):
                raise InvalidOptionError(f"{name} must be a positive integer or None (got {value!r})")
        if self.flash_attn is not None and not isinstance(self.flash_attn, bool):
            raise InvalidOptionError(f"flash_attn must be True, False or None (got {self.flash_attn!r})")
        for name in ("type_k", "type_v"):
            _check_bounds(self, name)
        for name in ("adaptive_threads", "offload_kqv", "fuse_catch_up", "grammar_drafts", "cache_prompt"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidOptionError(f"{name} must be a bool (got {getattr(self, name)!r})")
        _check_bounds(self, "rollback")

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> SessionOptions:
        """Options from keyword arguments (those of :class:`mtp_llm.MTP`), naming the valid ones
        when one is unknown."""
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = set(kwargs) - set(names)
        if unknown:
            raise unknown_option_error("MTP()", unknown, names)
        return cls(**kwargs)

    @property
    def may_draft(self) -> bool:
        """Whether sessions with these options draft at all (n_draft is not 0)."""
        return self.n_draft != 0

    def to_native(self) -> _core.ContextOptions:
        """The engine's ``ContextOptions``, filled field by field."""
        native = _core.ContextOptions()
        for field in dataclasses.fields(self):
            setattr(native, field.name, getattr(self, field.name))
        return native


@dataclasses.dataclass(frozen=True, slots=True)
class ChatGrammar:
    """A tool-call grammar from llama.cpp's chat layer (see :mod:`mtp_llm.chat`), passed as
    :attr:`GenerationOptions.grammar`: unlike a plain GBNF string it can be lazy (it
    constrains the output from the first trigger on, so the model may answer in
    text), and it says which special tokens the output is written with."""

    grammar: str = ""
    """GBNF; "" = no constraint (the other fields still apply)."""
    lazy: bool = False
    """Constrain only from the first trigger word or pattern on."""
    trigger_words: tuple[str, ...] = ()
    trigger_patterns: tuple[str, ...] = ()
    """Regular expressions; the grammar starts at the first capture group."""
    preserved_tokens: tuple[str, ...] = ()
    """Special tokens emitted as text (the chat markup the parser reads)."""
    generation_prompt: str = ""
    """What the template wrote after the last turn; the grammar starts after it."""
    thinking_start: str = ""
    thinking_end: tuple[str, ...] = ()
    """Reasoning tags: no tool call is triggered inside reasoning."""

    def to_native(self) -> _core.ChatGrammar:
        """The engine's ``ChatGrammar`` (all fields but ``grammar``, which is the sampling grammar)."""
        native = _core.ChatGrammar()
        for field in dataclasses.fields(self):
            if field.name != "grammar":
                value = getattr(self, field.name)
                setattr(native, field.name, list(value) if isinstance(value, tuple) else value)
        return native


@dataclasses.dataclass(frozen=True, slots=True)
class GenerationOptions:
    """Options of one generation call (the sampler defaults are llama.cpp's)."""

    PYTHON_ONLY: ClassVar[frozenset[str]] = frozenset({"emit_stats_every"})
    """Fields the Python layer handles itself (not passed to the engine)."""
    SAMPLING: ClassVar[frozenset[str]] = frozenset(
        n for n in dir(_core.SamplingOptions) if not n.startswith("_") and n != "chat"
    )
    """Fields of the engine's ``GenerateOptions.sampling`` part (read from the engine; its ``chat``
    is set from a :class:`ChatGrammar` ``grammar``)."""

    max_tokens: int = option(256, ge=1)
    """Maximum number of tokens to generate."""
    emit_stats_every: int = option(0, ge=0)
    """Emit a StatsEvent every N tokens (0 = only at the end)."""
    timeout: float | None = option(None, gt=0.0)
    """Seconds before the generation is stopped with GenerationTimeoutError."""
    stop: tuple[str, ...] = ()
    """Stop strings: generation ends when one appears; it is never emitted."""
    temp: float = option(0.8, ge=0.0, attribute="temperature")
    """Sampling temperature; 0 samples greedily (``temperature`` in the integrations)."""
    draft_temp: float | None = option(None, ge=0.0)
    """Temperature the MTP head samples its drafts at when ``temp`` > 0 (among the tokens a grammar
    allows): drafts are then verified by rejection (exact speculative sampling: the output follows the
    target's distribution, and more drafts are accepted than the head's argmax gets). None = ``temp``,
    or 0 under a grammar (there it measured faster); 0 = the head's argmax, verified by sampling the
    target and comparing (always under a grammar that a reasoning budget steers)."""
    top_k: int = option(40, ge=0)
    """Top-k sampling: keep the k most likely tokens (0 = the whole vocabulary)."""
    top_p: float = option(0.95, ge=0.0, le=1.0)
    """Nucleus sampling: keep the most likely tokens up to this total probability (1 = off)."""
    min_p: float = option(0.05, ge=0.0, le=1.0)
    """Min-p sampling: drop tokens less likely than this times the most likely one (0 = off)."""
    seed: int = option(DEFAULT_SEED, ge=0, le=DEFAULT_SEED)
    """Sampler seed; 0xFFFFFFFF (llama.cpp's default) = a random seed per call."""
    repeat_penalty: float = option(1.0, gt=0.0)
    """Repetition penalty on the last ``penalty_last_n`` tokens (1.0 = off)."""
    frequency_penalty: float = 0.0
    """Penalty per earlier occurrence of a token in the last ``penalty_last_n`` tokens (0 = off)."""
    presence_penalty: float = 0.0
    """Penalty on tokens present in the last ``penalty_last_n`` tokens (0 = off)."""
    penalty_last_n: int = option(64, ge=-1)
    """Tokens the penalties look back on (-1 = the whole context, 0 = none)."""
    grammar: str | ChatGrammar | None = None
    """A GBNF grammar that constrains the output, or a chat layer's tool-call grammar."""
    n_draft: DraftLength | None = None
    """Draft length for this call: None = the session's; an integer up to the
    session's longest draft (0 = plain decoding); "auto"."""
    cache_prompt: bool | None = None
    """Reuse the prompt prefix already in the contexts (None = the session's setting)."""
    reasoning_budget: int = option(-1, ge=-1)
    """Most tokens the model may write in its format's reasoning section (llama-server's
    ``--reasoning-budget``, through llama.cpp's reasoning-budget sampler): -1 = unlimited,
    0 = no reasoning (the section is closed at once), N = at most N tokens, then the end
    tag is forced and the answer follows. Applies to chat turns whose format has reasoning
    tags (:mod:`mtp_llm.chat`); a raw completion has none and is not affected."""
    logprobs: bool = False
    """Report each generated token's log-probability under the target model (natural log of
    softmax(logits / temp), or of the raw logits when greedy: before penalties, grammar and
    truncation) on :class:`~mtp_llm.TokenEvent`; the integrations put them where LangChain
    (``response_metadata["logprobs"]``) and LlamaIndex (``logprobs``) users look. With MTP the
    values are the verify pass's, equal to plain decoding's."""
    top_logprobs: int = option(0, ge=0, le=MAX_TOP_LOGPROBS)
    """Also report the k most likely tokens at each position with their log-probabilities
    (implies ``logprobs``)."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            _set(self, field.name, _coerce(field.name, getattr(self, field.name)))
        _check_bounds(self, "max_tokens")
        _check_bounds(self, "top_logprobs")
        if self.emit_stats_every < 0:
            raise InvalidOptionError("emit_stats_every must be >= 0 (0 = off)")
        if self.timeout is not None and not (self.timeout > 0 and math.isfinite(self.timeout)):
            raise InvalidOptionError(f"timeout must be a positive number of seconds or None (got {self.timeout})")
        if not 0 <= self.seed <= 0xFFFFFFFF:
            raise InvalidOptionError("seed must be in [0, 2**32 - 1]")
        if isinstance(self.grammar, str) and not self.grammar.strip():
            raise InvalidOptionError("grammar must not be empty (pass None for no grammar)")

    @classmethod
    def from_kwargs(cls, base: GenerationOptions | None = None, /, **kwargs: Any) -> GenerationOptions:
        """Options from keyword arguments on top of ``base``, checking names and types.
        None leaves a field at ``base``'s value, except for the fields whose None
        means "none" (timeout, grammar, n_draft)."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(kwargs) - names
        if unknown:
            raise unknown_option_error("the call", unknown, names)
        values = {k: v for k, v in kwargs.items() if v is not None or k in _OPTIONAL_FIELDS}
        return dataclasses.replace(base or cls(), **values)

    def to_native(self) -> _core.GenerateOptions:
        """The engine's ``GenerateOptions``, filled field by field."""
        native = _core.GenerateOptions()
        sampling = native.sampling
        for field in dataclasses.fields(self):
            if field.name not in self.PYTHON_ONLY:
                value = getattr(self, field.name)
                if isinstance(value, ChatGrammar):
                    sampling.chat = value.to_native()
                    value = value.grammar or None
                setattr(sampling if field.name in self.SAMPLING else native, field.name, value)
        return native


def _check_bounds(instance: object, name: str) -> None:
    """InvalidOptionError unless field ``name`` of ``instance`` is within its declared bounds."""
    cls: Any = type(instance)
    spec = _specs_by_name(cls)[name]
    value = getattr(instance, name)
    if value is None:
        return
    if spec.choices is not None and value not in spec.choices:
        raise InvalidOptionError(f"{name} must be one of {sorted(spec.choices)} (got {value!r})")
    if spec.ge is not None and spec.le is not None and not spec.ge <= value <= spec.le:
        raise InvalidOptionError(f"{name} must be between {spec.ge} and {spec.le} (got {value!r})")
    if spec.ge is not None and spec.le is None and value < spec.ge:
        raise InvalidOptionError(f"{name} must be at least {spec.ge} (got {value!r})")


def _set(instance: object, name: str, value: Any) -> None:
    object.__setattr__(instance, name, value)  # frozen dataclass: normalise in __post_init__


def _is_not_int(value: Any) -> bool:
    return isinstance(value, bool) or not isinstance(value, int)


INT32_MAX = 2**31 - 1
"""The largest value the engine's integer options hold."""


def _int(name: str, value: Any) -> int:
    if _is_not_int(value):
        raise InvalidOptionError(f"{name} must be an integer (got {value!r})")
    if not -INT32_MAX <= value <= INT32_MAX:
        bound = f"at most {INT32_MAX}" if value > 0 else f"at least {-INT32_MAX}"
        raise InvalidOptionError(f"{name} must be {bound} (got {value})")
    return int(value)


def utf8_text(name: str, value: str, error: type[Exception] = InvalidOptionError) -> str:
    """``value`` unless it cannot be UTF-8 (a lone surrogate, e.g. from bytes decoded with
    ``errors="surrogateescape"``): then ``error`` naming ``name`` and where."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise error(
            f"{name} is not valid Unicode: a lone surrogate {value[exc.start]!r} at index {exc.start} cannot be "
            "UTF-8 (decode text with errors='replace', not 'surrogateescape')"
        ) from None
    return value


_OPTIONAL_FIELDS = {"timeout", "grammar", "n_draft", "cache_prompt", "draft_temp"}


def _coerce(name: str, value: Any) -> Any:
    if name == "stop":
        return normalize_stop(value)
    if value is None:
        if name not in _OPTIONAL_FIELDS:
            raise InvalidOptionError(f"{name} must not be None")
        return None
    if name == "n_draft":
        return draft_length(name, value)
    if name == "reasoning_budget":
        if _is_not_int(value) or not -1 <= value <= INT32_MAX:
            raise InvalidOptionError(
                "reasoning_budget must be -1 (unlimited), 0 (no reasoning) or a number of reasoning tokens N > 0 "
                f"(got {value!r})"
            )
        return int(value)
    if name == "cache_prompt":
        if not isinstance(value, bool):
            raise InvalidOptionError(f"cache_prompt must be True, False or None (got {value!r})")
        return value
    kind = _specs_by_name(GenerationOptions)[name].scalar
    if name == "seed":  # 32 bits unsigned: checked in __post_init__
        if _is_not_int(value):
            raise InvalidOptionError(f"seed must be an integer (got {value!r})")
        return int(value)
    if kind is int:
        return _int(name, value)
    if kind is bool:
        if not isinstance(value, bool):
            raise InvalidOptionError(f"{name} must be True or False (got {value!r})")
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidOptionError(f"{name} must be a number (got {value!r})")
        value = float(value)
        if math.isnan(value):
            raise InvalidOptionError(f"{name} must not be NaN")
        return value
    if name == "grammar":
        if not isinstance(value, (str, ChatGrammar)):
            raise InvalidOptionError(f"grammar must be a GBNF string (got {type(value).__name__})")
        return utf8_text("grammar", value) if isinstance(value, str) else value
    return value


def machine_threads() -> int:
    """Logical CPUs this process may run on: the most compute threads that do not wait for each other."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def fit_threads(name: str, value: int | None, *, stacklevel: int = 3) -> int | None:
    """``value`` (a thread count, None = every core), at most :func:`machine_threads`, warning
    (RuntimeWarning) where it was more: ggml's threads wait for each other at every step, so
    threads beyond the cores only add waiting (16 on 2 cores made a session take 8 s to start)."""
    cores = machine_threads()
    if value is None or value <= cores:
        return value
    warnings.warn(
        f"{name}={value} is more than the {cores} CPUs this process can run on: using {cores} "
        "(more threads than cores only wait for each other)",
        RuntimeWarning,
        stacklevel=stacklevel,
    )
    return cores


def draft_length(name: str, value: Any) -> DraftLength:
    """A valid draft length ("auto" or 0..MAX_DRAFT), or InvalidOptionError naming the valid values."""
    if value == "auto" and isinstance(value, str):
        return "auto"
    if _is_not_int(value) or not 0 <= value <= MAX_DRAFT:
        raise InvalidOptionError(
            f"{name} must be 'auto' or an integer from 0 (plain decoding) to {MAX_DRAFT} (got {value!r})"
        )
    return int(value)


def probability(name: str, value: Any) -> float:
    """A number in [0, 1], or InvalidOptionError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise InvalidOptionError(f"{name} must be a number in [0, 1] (got {value!r})")
    return float(value)


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
    for s in stop:
        utf8_text("a stop string", s)
    return tuple(dict.fromkeys(stop))


# ------------------------------------------------------------------ schema --


@dataclasses.dataclass(frozen=True)
class OptionSpec:
    """One option as declared in :class:`SessionOptions` or :class:`GenerationOptions`: what
    :class:`~mtp_llm.MTP`'s keyword arguments, the LangChain and LlamaIndex fields and the CLI's
    flags are derived from."""

    name: str
    type: Any
    """The field's annotation, resolved (e.g. ``int | None``)."""
    annotation: str
    """The annotation as written (``"int | None"``, ``"DraftLength"``)."""
    default: Any
    doc: str
    """The attribute docstring below the field, dedented."""
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    choices: tuple[str, ...] | None = None
    attribute: str | None = None
    """The integrations' name for the option when it differs (``temp`` -> ``temperature``)."""

    @property
    def scalar(self) -> type | None:
        """``int``, ``float``, ``bool`` or ``str`` when the type is that (or that or None), else None."""
        args = [a for a in typing.get_args(self.type) if a is not type(None)] or [self.type]
        return args[0] if len(args) == 1 and args[0] in (int, float, bool, str) else None

    @property
    def optional(self) -> bool:
        """Whether None is a value of the type."""
        return type(None) in typing.get_args(self.type)

    @property
    def flag(self) -> str:
        """The CLI flag (``n_draft_max`` -> ``--n-draft-max``)."""
        return "--" + self.name.replace("_", "-")


def option_docs(cls: type) -> dict[str, str]:
    """The attribute docstrings of a class's fields (the string below each annotated name), as vLLM's
    ``get_attr_docs`` reads them: each option's doc is written once, in its dataclass."""
    return dict(_option_docs(cls))


@functools.cache
def _option_docs(cls: Any) -> tuple[tuple[str, str], ...]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs: list[tuple[str, str]] = []
    for node, after in zip(body, body[1:]):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs.append((node.target.id, inspect.cleandoc(after.value.value)))
    return tuple(docs)


@functools.cache
def option_specs(cls: Any) -> tuple[OptionSpec, ...]:
    """The options of a dataclass of options (:class:`SessionOptions`, :class:`GenerationOptions`, the
    integrations' :class:`~mtp_llm._integration.EngineSpec`), in declaration order."""
    hints = typing.get_type_hints(cls, globalns=vars(inspect.getmodule(cls)), localns=globals())
    docs = dict(_option_docs(cls))
    specs = []
    for field in dataclasses.fields(cls):
        meta = field.metadata
        specs.append(
            OptionSpec(
                name=field.name,
                type=hints[field.name],
                annotation=field.type if isinstance(field.type, str) else getattr(field.type, "__name__", repr(field.type)),
                default=field.default,
                doc=docs.get(field.name, ""),
                ge=meta.get("ge"),
                gt=meta.get("gt"),
                le=meta.get("le"),
                choices=meta.get("choices"),
                attribute=meta.get("attribute"),
            )
        )
    return tuple(specs)


@functools.cache
def _specs_by_name(cls: Any) -> dict[str, OptionSpec]:
    return {spec.name: spec for spec in option_specs(cls)}
