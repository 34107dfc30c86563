"""MTP speculative-decoding sessions: the Python face of the native engine."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import itertools
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

from . import _core
from .errors import GenerationTimeoutError, InvalidOptionError, InvalidPromptError, MTPError, SessionBusyError
from .events import DoneEvent, EogEvent, Event, StatsEvent, TextScore, TokenEvent
from .model import Model
from .options import INT32_MAX, DraftLength, GenerationOptions, SessionOptions, _is_not_int, fit_threads, option_specs
from .stats import DraftControllerEstimates, MTPStats

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._kwargs import SessionKwargs

Prompt = str | bytes | Sequence[int]



def _on_event_loop_thread() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class _Holder:
    """A generation holding a slot: who, since when, and whether it waits for its reader."""

    __slots__ = ("thread_id", "thread", "task", "since", "at_yield")

    def __init__(self, task: str | None = None) -> None:
        self.thread_id = None if task is not None else threading.get_ident()
        """The holding thread (None for an asyncio task: it never waits on itself)."""
        self.thread = threading.current_thread().name
        self.task = task
        self.since = time.monotonic()
        self.at_yield = False
        """Suspended at a yield: the stream waits for its reader to take the next piece."""

    def describe(self, now: float) -> str:
        stream = f"an async stream in task {self.task!r}" if self.task is not None else f"a stream in thread {self.thread!r}"
        state = "that was not exhausted or closed" if self.at_yield else "still generating"
        return f"held for {now - self.since:.1f} s by {stream} {state}"


class _SlotGate:
    """Admission to a session's ``n_parallel`` slots: when all are taken, other threads wait
    and asyncio tasks await, until a slot frees or the call's ``timeout`` (one deadline for
    the wait and the generation) passes; a thread that already holds one, or the event loop's
    own thread, gets SessionBusyError instead (it would wait on itself)."""

    def __init__(self, n_slots: int) -> None:
        self._n_slots = n_slots
        self._free = n_slots
        self._holders: list[_Holder] = []
        self._changed = threading.Condition()
        self._closed = False

    def _busy_error(self) -> SessionBusyError:
        if self._n_slots == 1:
            return SessionBusyError(
                "a generation is already running on this session in this thread (an unfinished stream?): "
                "exhaust or close it first, or use another MTP session"
            )
        return SessionBusyError(
            f"all {self._n_slots} slots of this session are busy and this thread holds one (an unfinished "
            "stream?): exhaust or close it first, or create the session with a larger n_parallel"
        )

    def _timeout_error(self, timeout: float) -> GenerationTimeoutError:
        now = time.monotonic()
        held = [h.describe(now) for h in sorted(self._holders, key=lambda h: h.since)]
        if len(held) > 4:
            held[4:] = [f"and {len(held) - 4} more"]
        if self._n_slots == 1 and held:
            where = f"the session's only slot has been {held[0]}"
        else:
            where = f"all {self._n_slots} slots of this session are taken: {', '.join(held)}"
        return GenerationTimeoutError(
            f"timed out waiting for a slot after {timeout:.1f} s: {where}; close or exhaust the stream (a dropped "
            "one is released when garbage-collected), create the session with more slots (n_parallel), "
            "or use another MTP session"
        )

    def close(self, running: bool) -> None:
        """Refuse every later call; SessionBusyError while a call holds a slot or ``running``."""
        with self._changed:
            if running or self._free != self._n_slots:
                raise SessionBusyError("cannot close a session while a generation is running")
            self._closed = True
            self._changed.notify_all()

    def _take(self, holder: _Holder) -> _Holder:
        if self._closed:
            raise MTPError(_CLOSED_MESSAGE)
        self._free -= 1
        self._holders.append(holder)
        return holder

    def release(self, holder: _Holder) -> None:
        with self._changed:
            self._free += 1
            self._holders.remove(holder)
            self._changed.notify()

    @contextlib.contextmanager
    def hold(self, timeout: float | None) -> Iterator[_Holder]:
        """A slot for this thread; without ``timeout`` the wait for it has no bound."""
        start = time.monotonic()
        with self._changed:
            if self._closed:
                raise MTPError(_CLOSED_MESSAGE)
            if self._free == 0:
                owner = threading.get_ident()
                if any(h.thread_id == owner for h in self._holders) or _on_event_loop_thread():
                    # Waiting here would block the holder (this thread, or the event loop that finishes it).
                    raise self._busy_error()
                while self._free == 0 and not self._closed:
                    if timeout is None:
                        self._changed.wait()
                    elif (left := start + timeout - time.monotonic()) > 0:
                        self._changed.wait(left)
                    else:
                        raise self._timeout_error(timeout)
            holder = self._take(_Holder())
        try:
            yield holder
        finally:
            self.release(holder)

    async def acquire_async(self, timeout: float | None) -> _Holder:
        """A slot for the current task (release it with :meth:`release`)."""
        # Polling keeps cancellation safe: a cancelled waiter never holds a slot.
        start = time.monotonic()
        task = asyncio.current_task()
        name = task.get_name() if task is not None else "?"
        while True:
            with self._changed:
                if self._free > 0:
                    return self._take(_Holder(name))
                if timeout is not None and time.monotonic() - start >= timeout:
                    raise self._timeout_error(timeout)
            await asyncio.sleep(0.002)


def _time_left(options: GenerationOptions, started: float) -> GenerationOptions:
    """``options`` with what is left of its timeout after the wait for a slot since ``started``."""
    if options.timeout is None:
        return options
    return dataclasses.replace(options, timeout=max(options.timeout - (time.monotonic() - started), 1e-3))


async def _settle(future: asyncio.Future[Any]) -> None:
    """Waits for a worker thread's call whose awaiting task was cancelled (the native call
    must end before its generation does), also through further cancellations, and retrieves
    its outcome (GenerationCancelledError, mostly) so that asyncio has nothing to log."""
    while not future.done():
        with contextlib.suppress(asyncio.CancelledError):  # the caller raises CancelledError after
            await asyncio.wait([future])
    if not future.cancelled():
        future.exception()


_call_ids = itertools.count(1)  # ids of generations, for MTP._native.end_call

_CLOSED_MESSAGE = "this MTP session is closed: create a new one"


class _Closed:
    """What a closed session's native part is: every use raises MTPError (also for a call that
    raced :meth:`MTP.close`)."""

    def __getattr__(self, name: str) -> Any:
        raise MTPError(_CLOSED_MESSAGE)

    def __bool__(self) -> bool:
        return False


_CLOSED = _Closed()



class MTP:
    """A speculative-decoding session: target context, MTP draft context and
    llama.cpp's draft-mtp state, plus the target sampler.

    Up to ``n_parallel`` generations run at once (default 1): each takes a slot, and every
    step drafts and verifies all running ones in shared batches; further calls from other
    threads wait their turn, asyncio tasks await without blocking the loop: without bound, or
    within the call's ``timeout``, which counts the wait and the generation together (past it,
    GenerationTimeoutError says what holds the slots).
    Statistics accumulate across calls (see :meth:`stats`).

    The other keyword arguments are the fields of :class:`SessionOptions` (``n_draft``,
    ``n_ctx``, ``n_parallel``, ...), with their defaults and documented there (the
    signature of ``MTP`` lists them, derived from that one declaration);
    :meth:`from_options` takes a ``SessionOptions`` directly.

    Args:
        model: the target model (with an embedded MTP head unless ``draft_model``).
        draft_model: a sidecar model holding the MTP head (``mtp-*.gguf``), loaded with
            ``load_mtp=True``; ``"auto"`` (the default) loads ``model.sidecar_path`` (the head
            fetched with a hub model, or the head file beside a trunk-only target: named
            ``mtp-<name>.gguf`` or as llama.cpp's converter names it, checked by its metadata)
            when there is one; None uses none. The one used is :attr:`draft_model`.
        defaults: generation options each call starts from.
        **options: :class:`SessionOptions` fields; an unknown name raises InvalidOptionError.
    """

    def __init__(
        self,
        model: Model,
        *,
        draft_model: Model | Literal["auto"] | None = "auto",
        defaults: GenerationOptions | None = None,
        **options: Unpack[SessionKwargs],
    ) -> None:
        self._open(model, draft_model, SessionOptions.from_kwargs(**options), defaults)

    @classmethod
    def from_options(
        cls,
        model: Model,
        options: SessionOptions,
        *,
        draft_model: Model | Literal["auto"] | None = "auto",
        defaults: GenerationOptions | None = None,
    ) -> MTP:
        """A session created from a :class:`SessionOptions` (same meaning as the keyword arguments)."""
        if not isinstance(options, SessionOptions):
            raise InvalidOptionError(f"options must be an mtp_llm.SessionOptions (got {type(options).__name__})")
        session = cls.__new__(cls)
        session._open(model, draft_model, options, defaults)
        return session

    def _open(
        self,
        model: Model,
        draft_model: Model | Literal["auto"] | None,
        options: SessionOptions,
        defaults: GenerationOptions | None,
    ) -> None:
        if not isinstance(model, Model):
            raise InvalidOptionError(f"model must be an mtp_llm.Model (got {type(model).__name__})")
        if isinstance(draft_model, str):
            if draft_model != "auto":
                raise InvalidOptionError(f"draft_model must be an mtp_llm.Model, 'auto' or None (got {draft_model!r})")
            draft_model = model.load_sidecar() if options.may_draft else None
        if draft_model is not None and not isinstance(draft_model, Model):
            raise InvalidOptionError(f"draft_model must be an mtp_llm.Model (got {type(draft_model).__name__})")
        self.model = model
        self.draft_model = draft_model
        """The sidecar MTP head in use (the file picked: ``draft_model.path``), or None."""
        self.session_options = options
        """The options this session was created with."""
        self.defaults = defaults or GenerationOptions()
        self._slots = _SlotGate(options.n_parallel)
        self._native: Any = _CLOSED
        threads = dataclasses.replace(
            options,
            n_threads=fit_threads("n_threads", options.n_threads, stacklevel=5),
            n_threads_batch=fit_threads("n_threads_batch", options.n_threads_batch, stacklevel=5),
        )
        self._native = _core.Session(
            model._native, draft_model._native if draft_model is not None else None, threads.to_native()
        )

    # ------------------------------------------------------------------ info

    @property
    def n_draft(self) -> DraftLength:
        """The session's draft length: "auto" or a fixed number of tokens."""
        n = self._native.n_draft
        return "auto" if n == "auto" else int(n)

    @property
    def n_draft_max(self) -> int:
        """The longest draft this session proposes (the bound of "auto", or the fixed length)."""
        return int(self._native.n_draft_max)

    @property
    def draft_controller(self) -> DraftControllerEstimates | None:
        """What the automatic draft length has learnt so far (None where the session cannot draft)."""
        return self.stats().draft_controller

    @property
    def prompt_cache_bytes(self) -> int:
        """Bytes held by saved states of other conversations (at most ``cache_size_mb``)."""
        return int(self._native.prompt_cache_bytes)

    @property
    def n_ctx(self) -> int:
        """Context size of the session, all slots together."""
        return int(self._native.n_ctx)

    @property
    def n_ctx_slot(self) -> int:
        """Tokens one generation can hold (prompt plus output): ``n_ctx // n_parallel``,
        rounded up to llama.cpp's 256-cell granularity."""
        return int(self._native.n_ctx_slot)

    @property
    def n_parallel(self) -> int:
        """Generations that can run at once (slots)."""
        return int(self._native.n_parallel)

    @property
    def cache_bytes(self) -> int:
        """Memory of both contexts' caches (KV cells, recurrent state) for all slots:
        ``cache_bytes / n_parallel`` is what a slot costs."""
        return int(self._native.cache_bytes)

    @property
    def rollback_mode(self) -> str:
        """How the target undoes rejected drafts: "partial" (KV cache), "rs"
        (recurrent-state snapshots) or "checkpoint" (save/restore)."""
        return str(self._native.rollback_mode)

    @property
    def mtp_driver(self) -> str:
        """Who drives the MTP head: "fused" (mtp_llm's driver, catch-up decoded with the
        first draft step), "upstream" (llama.cpp's common_speculative) or "none" (plain)."""
        return str(self._native.mtp_driver)

    @property
    def draft_vocab_size(self) -> int:
        """Tokens the MTP head scores per draft step: fewer than the model's ``n_vocab`` for a
        trimmed head (``docs/draft-vocab.md``; the target still verifies over all), 0 for plain decoding."""
        return int(self._native.draft_vocab_size)

    @property
    def devices(self) -> dict[str, list[str]]:
        """Where each context runs: ``"target"`` and, with an MTP head, ``"mtp"``, each mapped to
        the devices holding its layers' weights and its KV cache, e.g.
        ``{"target": ["CUDA0"], "mtp": ["CPU"]}`` (ggml's device names, CPU first)."""
        self._check_open()
        return {name: sorted(devs, key=lambda d: d != "CPU") for name, devs in self._native.devices.items()}

    @property
    def cpu_variant(self) -> str:
        """The variant of ggml's CPU backend this session computes with on the CPU ("zen4", "haswell", ...;
        "static" in a build for one CPU): :func:`mtp_llm.cpu_backend` says why."""
        self._check_open()
        return str(_core.cpu_backend()["variant"])

    @property
    def n_threads(self) -> int:
        """Compute threads each decode runs on (``n_threads``, or every core when it is unset)."""
        return int(self._native.n_threads)

    @property
    def flash_attn(self) -> str:
        """Flash attention in effect: "on", "off", or "auto" (llama.cpp decides per device)."""
        return str(self._native.flash_attn)

    def stats(self) -> MTPStats:
        """Cumulative stats over every call since creation or :meth:`reset_stats`.
        Safe to call from any thread, also while a generation runs."""
        return MTPStats.from_counters(self._native.stats())

    @property
    def last_stats(self) -> MTPStats:
        """Stats of the latest begun (or running) call only; each call's own come with its
        :class:`DoneEvent`."""
        return MTPStats.from_counters(self._native.call_stats())

    def reset_stats(self) -> None:
        self._native.reset_stats()

    def print_stats(self) -> None:
        """Print llama.cpp's own draft-mtp statistics line (to stdout)."""
        self._native.print_stats()

    def cancel(self) -> None:
        """Stop the running generations (from any thread); each raises GenerationCancelledError."""
        self._native.cancel()

    # ----------------------------------------------------------- generation

    def score(self, text: Prompt, *, n_batch: int = 512) -> TextScore:
        """How likely the target model finds ``text`` (text, UTF-8 bytes or token ids): each
        token's log-probability given the ones before it, their sum and the perplexity.

        Runs in a context of its own (the session's slots and caches are untouched), with the
        session's threads, ``n_batch`` tokens per decode; raises InvalidPromptError for a
        text of fewer than two tokens.
        """
        tokens = self.tokenize_prompt(text)
        if _is_not_int(n_batch) or not 1 <= n_batch <= INT32_MAX:
            raise InvalidOptionError(f"n_batch must be an integer from 1 to {INT32_MAX} (got {n_batch!r})")
        logprobs = _core.score_tokens(self.model._native, tokens, n_batch, self.n_threads)
        return TextScore(tuple(tokens), tuple(logprobs))

    def tokenize_prompt(self, prompt: Prompt) -> list[int]:
        """Turn a prompt (text, UTF-8 bytes or token ids) into token ids."""
        self._check_open()
        if isinstance(prompt, bytes):
            try:
                prompt = prompt.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InvalidPromptError(f"prompt bytes are not valid UTF-8: {exc}") from None
        if isinstance(prompt, str):
            if prompt == "":
                raise InvalidPromptError("prompt is empty: pass some text or token ids")
            tokens = self.model.tokenize(prompt)
            if not tokens:
                raise InvalidPromptError("prompt produced no tokens")
            return tokens
        if isinstance(prompt, Sequence) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            if len(prompt) == 0:
                raise InvalidPromptError("prompt is empty: pass some text or token ids")
            tokens = list(cast(Sequence[int], prompt))
            self.model.check_tokens(tokens)
            return tokens
        raise InvalidPromptError(f"prompt must be str, bytes or a sequence of token ids (got {type(prompt).__name__})")

    def options(self, **kwargs: Any) -> GenerationOptions:
        """Resolve per-call keyword options on top of the session defaults."""
        self._check_open()
        return GenerationOptions.from_kwargs(self.defaults, **kwargs)

    def _call_options(self, options: GenerationOptions | None, kwargs: dict[str, Any]) -> GenerationOptions:
        self._check_open()
        if options is None:
            return self.options(**kwargs)
        if not isinstance(options, GenerationOptions):
            raise InvalidOptionError(f"options must be an mtp_llm.GenerationOptions (got {type(options).__name__})")
        if kwargs:
            raise InvalidOptionError(
                f"pass either options= or keyword options, not both (got options= and {sorted(kwargs)})"
            )
        return options

    def generate(self, prompt: Prompt, *, options: GenerationOptions | None = None, **kwargs: Any) -> str:
        """Generate text (greedy with ``temp=0``); the joined :meth:`stream`."""
        return "".join(self.stream(prompt, options=options, **kwargs))

    def stream(self, prompt: Prompt, *, options: GenerationOptions | None = None, **kwargs: Any) -> Iterator[str]:
        """Yield text pieces as they are produced (empty pieces are skipped)."""
        for event in self.stream_events(prompt, options=options, **kwargs):
            if type(event) is TokenEvent and event.text:
                yield event.text

    def stream_events(
        self, prompt: Prompt, *, options: GenerationOptions | None = None, **kwargs: Any
    ) -> Iterator[Event]:
        """Yield TokenEvent per token, StatsEvent every ``emit_stats_every``
        tokens, EogEvent at end-of-generation, and a final DoneEvent.

        Options come as keywords (on top of the session's ``defaults``) or as a
        ready :class:`GenerationOptions` in ``options`` (used as is).
        Breaking out of the loop or closing the iterator ends the generation;
        the session is immediately reusable.
        """
        opts = self._call_options(options, kwargs)
        tokens = self.tokenize_prompt(prompt)
        self._check_open()
        started = time.monotonic()
        with self._slots.hold(opts.timeout) as holder:
            opts = _time_left(opts, started)
            call = next(_call_ids)
            try:
                # end_call in the finally: an interrupt right after begin() still ends the generation.
                slot = self._begin(tokens, opts, call)
                for event in self._drive(slot, opts):
                    holder.at_yield = True
                    yield event
                    holder.at_yield = False
            finally:
                self._native.end_call(call)

    async def astream_events(
        self, prompt: Prompt, *, options: GenerationOptions | None = None, **kwargs: Any
    ) -> AsyncIterator[Event]:
        """Async :meth:`stream_events`: the native steps run in a worker thread,
        so the event loop stays free. Cancelling the task stops the native
        loop and leaves the session reusable."""
        opts = self._call_options(options, kwargs)
        tokens = self.tokenize_prompt(prompt)
        self._check_open()
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        holder = await self._slots.acquire_async(opts.timeout)
        opts = _time_left(opts, started)
        call = next(_call_ids)
        try:
            try:
                slot = await self._in_thread(loop, None, self._begin, tokens, opts, call)
                events = _EventStream(self, slot, opts.emit_stats_every)
                finished = False
                while not finished:
                    step_tokens, finished, reason = await self._in_thread(loop, slot, self._native.step, slot)
                    for event in events.feed(step_tokens, finished, reason):
                        holder.at_yield = True
                        yield event
                        holder.at_yield = False
            finally:
                self._native.end_call(call)  # also when cancelled while begin() ran
        finally:
            self._slots.release(holder)

    async def agenerate(self, prompt: Prompt, *, options: GenerationOptions | None = None, **kwargs: Any) -> str:
        """Async :meth:`generate`."""
        parts = [e.text async for e in self.astream_events(prompt, options=options, **kwargs) if type(e) is TokenEvent]
        return "".join(parts)

    async def _in_thread(self, loop: asyncio.AbstractEventLoop, slot: int | None, fn: Any, *args: Any) -> Any:
        future = loop.run_in_executor(None, fn, *args)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if slot is not None:
                self._native.cancel(slot)
            await _settle(future)
            raise

    def _begin(self, tokens: list[int], options: GenerationOptions, call: int) -> int:
        return int(self._native.begin(tokens, options.to_native(), call))

    def _drive(self, slot: int, opts: GenerationOptions) -> Iterator[Event]:
        step = self._native.step
        events = _EventStream(self, slot, opts.emit_stats_every)
        finished = False
        while not finished:
            step_tokens, finished, reason = step(slot)
            yield from events.feed(step_tokens, finished, reason)

    # ------------------------------------------------------------- lifetime

    def close(self) -> None:
        """Free the contexts now (the model stays loaded while referenced). Every later use of the
        session raises MTPError, also in calls racing this one; closing again does nothing.

        Raises:
            SessionBusyError: a generation is running (or holds a slot: an unfinished stream).
        """
        native = self._native
        if native is _CLOSED:
            return
        self._slots.close(bool(native.active))
        self._native = _CLOSED

    def _check_open(self) -> None:
        if self._native is _CLOSED:
            raise MTPError(_CLOSED_MESSAGE)

    def __enter__(self) -> MTP:
        self._check_open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._native is _CLOSED:
            return f"MTP(model={self.model!r}, closed)"
        return f"MTP(model={self.model!r}, n_draft={self.n_draft}, n_ctx={self.n_ctx})"


def _signature() -> inspect.Signature:
    """``MTP(model, *, draft_model, defaults, **options)`` with ``options`` spelled out from
    :class:`SessionOptions` (what ``help(MTP)`` and ``inspect.signature`` show)."""
    own = inspect.signature(MTP.__init__)
    params = [p for p in own.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    params += [
        inspect.Parameter(spec.name, inspect.Parameter.KEYWORD_ONLY, default=spec.default, annotation=spec.type)
        for spec in option_specs(SessionOptions)
    ]
    return own.replace(parameters=params)


MTP.__init__.__signature__ = _signature()  # type: ignore[attr-defined]


class _EventStream:
    """Turns native step results into typed events (shared by sync and async paths)."""

    __slots__ = ("_session", "_slot", "_every", "_count")

    def __init__(self, session: MTP, slot: int, every: int) -> None:
        self._session = session
        self._slot = slot
        self._every = every
        self._count = 0

    def _stats(self) -> MTPStats:
        return MTPStats.from_counters(self._session._native.call_stats(self._slot))

    def feed(self, step_tokens: list[Any], finished: bool, reason: str | None) -> list[Event]:
        events: list[Event] = []
        every = self._every
        for token in step_tokens:
            if len(token) == 2:
                events.append(TokenEvent(token[0], token[1]))
            else:  # the call asked for logprobs
                events.append(TokenEvent(token[0], token[1], token[2], tuple(token[3])))
            if every:
                self._count += 1
                if self._count % every == 0:
                    events.append(StatsEvent(self._stats()))
        if finished:
            if reason == "eog":
                events.append(EogEvent(step_tokens[-1][0]))
            events.append(DoneEvent(self._stats(), reason or "length"))
        return events


__all__ = ["MTP", "Prompt"]
