"""Edges of concurrent use: async cancellation is quiet (no unretrieved future, log line or
warning) and leaves the session reusable in every async entry point; ``timeout=`` bounds the
wait for a slot held by an open stream, and says what holds it."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import re
import sys
import threading
import time
import warnings
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest
from llama_index.core.llms import ChatMessage

from mtp_llm import MTP, GenerationOptions, GenerationTimeoutError, Model, TokenEvent
from mtp_llm.langchain import MTPLLM as LangChainLLM
from mtp_llm.langchain import ChatMTP
from mtp_llm.llamaindex import MTPLLM as LlamaIndexLLM

from tests.helpers import THREADS, make_session

PROMPT = "Once upon a time, " * 16
"""256 tokens: the prompt of the calls cancelled mid-stream and of the greedy checks."""
LONG_PROMPT = "Once upon a time, " * 96
"""1536 tokens, three prompt steps of a few milliseconds each: the calls cancelled before the first token."""
N_CTX = 2048
MAX_TOKENS = 24
CANCELS = 50
GREEDY = GenerationOptions(temp=0)

# ------------------------------------------------------- async cancellation --


class _Reader:
    """Reads a stream; with ``stall_after`` it stops taking pieces after that many, like a client
    whose connection hangs: the stream stays suspended at a yield until the task is cancelled."""

    def __init__(self, stall_after: int | None = None) -> None:
        self.stall_after = stall_after
        self.stalled = asyncio.Event()

    async def join(self, pieces: AsyncIterator[Any], text: Callable[[Any], str]) -> str:
        read: list[str] = []
        async for piece in pieces:
            read.append(text(piece))
            if len(read) == self.stall_after:
                self.stalled.set()
                await asyncio.Event().wait()
        return "".join(read)


Run = Callable[[str, _Reader], Coroutine[Any, Any, str]]
"""One call of an entry point on a prompt; a streaming one reads its stream with the reader."""
STREAMING = {"MTP.astream_events", "langchain MTPLLM.astream", "langchain ChatMTP.astream"}
STREAMING |= {"llamaindex astream_complete", "llamaindex astream_chat"}


def _entry_point(name: str, model: Model) -> tuple[MTP, Run]:
    """The session an async entry point runs on, and one greedy call of it on a prompt (decoding all
    of it: ``cache_prompt=False``)."""
    session = make_session(model, n_draft=3, n_ctx=N_CTX, defaults=GREEDY)
    lc = LangChainLLM(session=session, temperature=0, max_tokens=MAX_TOKENS, cache_prompt=False)
    chat = ChatMTP(session=session, temperature=0, max_tokens=MAX_TOKENS, cache_prompt=False)
    li = LlamaIndexLLM(
        model=model, n_threads=THREADS, n_ctx=N_CTX, n_draft=3, temperature=0, max_tokens=MAX_TOKENS, cache_prompt=False
    )

    def user(prompt: str) -> list[ChatMessage]:
        return [ChatMessage(role="user", content=prompt)]

    async def li_stream_complete(prompt: str, reader: _Reader) -> str:
        return await reader.join(await li.astream_complete(prompt), lambda r: r.delta or "")

    async def li_stream_chat(prompt: str, reader: _Reader) -> str:
        return await reader.join(await li.astream_chat(user(prompt)), lambda r: r.delta or "")

    async def li_complete(prompt: str, reader: _Reader) -> str:
        return str((await li.acomplete(prompt)).text)

    async def li_chat(prompt: str, reader: _Reader) -> str:
        return (await li.achat(user(prompt))).message.content or ""

    async def lc_invoke(prompt: str, reader: _Reader) -> str:
        return str(await lc.ainvoke(prompt))

    async def chat_invoke(prompt: str, reader: _Reader) -> str:
        return str((await chat.ainvoke(prompt)).content)

    async def agenerate(prompt: str, reader: _Reader) -> str:
        return await session.agenerate(prompt, max_tokens=MAX_TOKENS, cache_prompt=False)

    runs: dict[str, Run] = {
        "MTP.astream_events": lambda prompt, reader: reader.join(
            session.astream_events(prompt, max_tokens=MAX_TOKENS, cache_prompt=False),
            lambda e: e.text if type(e) is TokenEvent else "",
        ),
        "MTP.agenerate": agenerate,
        "langchain MTPLLM.ainvoke": lc_invoke,
        "langchain MTPLLM.astream": lambda prompt, reader: reader.join(lc.astream(prompt), str),
        "langchain ChatMTP.ainvoke": chat_invoke,
        "langchain ChatMTP.astream": lambda prompt, reader: reader.join(chat.astream(prompt), lambda c: str(c.content)),
        "llamaindex acomplete": li_complete,
        "llamaindex astream_complete": li_stream_complete,
        "llamaindex achat": li_chat,
        "llamaindex astream_chat": li_stream_chat,
    }
    return (li.session if name.startswith("llamaindex") else session), runs[name]


ENTRY_POINTS = [
    "MTP.astream_events",
    "MTP.agenerate",
    "langchain MTPLLM.ainvoke",
    "langchain MTPLLM.astream",
    "langchain ChatMTP.ainvoke",
    "langchain ChatMTP.astream",
    "llamaindex acomplete",
    "llamaindex astream_complete",
    "llamaindex achat",
    "llamaindex astream_chat",
]


@contextlib.asynccontextmanager
async def _quiet(caplog: pytest.LogCaptureFixture) -> AsyncIterator[None]:
    """Fails unless the body leaves nothing for the event loop's exception handler, no warning
    (warnings are errors), no unraisable exception and no asyncio log line at WARNING or above,
    after a garbage collection."""
    loop = asyncio.get_running_loop()
    problems: list[str] = []
    handler, hook = loop.get_exception_handler(), sys.unraisablehook
    loop.set_exception_handler(lambda _loop, context: problems.append(f"{context['message']} {context.get('exception')!r}"))
    sys.unraisablehook = lambda u: problems.append(f"unraisable {u.exc_value!r} in {u.object!r}")
    caplog.set_level(logging.WARNING, logger="asyncio")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            yield
            for _ in range(3):
                gc.collect()
                await asyncio.sleep(0.01)  # finalizers of dropped async generators run as tasks
    finally:
        loop.set_exception_handler(handler)
        sys.unraisablehook = hook
    assert problems == []
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio" and r.levelno >= logging.WARNING] == []


async def _token_ids(session: MTP) -> list[int]:
    """The greedy tokens for PROMPT (reusing the prompt the contexts hold)."""
    events = session.astream_events(PROMPT, max_tokens=MAX_TOKENS, temp=0, cache_prompt=True)
    return [e.id async for e in events if type(e) is TokenEvent]


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
async def test_async_cancels_are_quiet_and_leave_the_session_reusable(
    random_model: Model, caplog: pytest.LogCaptureFixture, entry_point: str
) -> None:
    session, run = _entry_point(entry_point, random_model)
    expected_ids = await _token_ids(session)
    expected_text = await run(PROMPT, _Reader())
    assert len(expected_ids) == MAX_TOKENS and expected_text
    before_first_token = stalled = 0
    async with _quiet(caplog):
        for i in range(CANCELS):
            before = session.stats()
            start = before.tokens_emitted
            if i % 3 == 0:  # once the call began, while its prompt decodes: before the first token
                task = asyncio.create_task(run(LONG_PROMPT, _Reader()))
                while session.stats().generations == before.generations and not task.done():
                    await asyncio.sleep(0)
                for _ in range((3, 10, 25, 60)[i % 4]):  # loop turns: begin() has returned
                    await asyncio.sleep(0)
                before_first_token += session.stats().tokens_emitted == start
            elif i % 3 == 2 and entry_point in STREAMING:  # mid-stream, while the reader stalls
                reader = _Reader(stall_after=1 + i % 8)
                task = asyncio.create_task(run(PROMPT, reader))
                await asyncio.wait_for(reader.stalled.wait(), 10)
                stalled += 1
            else:  # mid-stream, after k of the MAX_TOKENS tokens, inside a step
                task = asyncio.create_task(run(PROMPT, _Reader()))
                while session.stats().tokens_emitted - start < 1 + i % 12 and not task.done():
                    await asyncio.sleep(0)
                for _ in range(i % 3):
                    await asyncio.sleep(0)
            assert not task.done()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            del task
        assert await _token_ids(session) == expected_ids
        assert await run(PROMPT, _Reader()) == expected_text
    assert before_first_token == len(range(0, CANCELS, 3))
    assert stalled == (len(range(2, CANCELS, 3)) if entry_point in STREAMING else 0)


# ------------------------------------------------------ waiting for a slot --


def _only_slot_message(timeout: float) -> str:
    """What a call that timed out waiting for the one slot says of a stream held open in the main thread."""
    return (
        rf"timed out waiting for a slot after {re.escape(f'{timeout:.1f}')} s: the session's only slot has been held for "
        r"(\d+\.\d) s "
        r"by a stream in thread 'MainThread' that was not exhausted or closed"
    )


def _greedy_session(model: Model, **options: Any) -> MTP:
    return make_session(model, n_draft=3, defaults=GREEDY, **options)


def _call_in_thread(fn: Callable[[], str]) -> tuple[threading.Thread, dict[str, Any]]:
    """Runs ``fn`` in a thread; the dict gets its "result" or "error", and "elapsed" seconds."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        start = time.monotonic()
        try:
            outcome["result"] = fn()
        except BaseException as error:  # noqa: BLE001 - reported to the test
            outcome["error"] = error
        outcome["elapsed"] = time.monotonic() - start

    thread = threading.Thread(target=target, daemon=True)  # a test that fails leaves it waiting
    thread.start()
    return thread, outcome


def _timed_out_waiting(session: MTP, timeout: float = 2.0) -> tuple[GenerationTimeoutError, float]:
    """``generate("Hi", max_tokens=4, timeout=...)`` from another thread: its error and time."""
    thread, outcome = _call_in_thread(lambda: session.generate("Hi", max_tokens=4, timeout=timeout))
    thread.join(timeout=8)
    assert not thread.is_alive(), "the call is still waiting for the slot past its timeout"
    assert isinstance(outcome.get("error"), GenerationTimeoutError), outcome
    return outcome["error"], outcome["elapsed"]


def test_timeout_bounds_the_wait_for_a_slot_held_by_an_open_stream(random_model: Model) -> None:
    s = _greedy_session(random_model)
    expected = s.generate("Hi", max_tokens=4)
    g = s.stream("Tell me a story", max_tokens=64)
    next(g)
    try:
        error, elapsed = _timed_out_waiting(s)
    finally:
        g.close()
    assert 1.5 <= elapsed <= 5
    message = str(error)
    held = re.match(_only_slot_message(2.0), message)
    assert held is not None, message
    assert float(held.group(1)) >= 1.5
    assert "close or exhaust the stream" in message and "n_parallel" in message and "another MTP session" in message
    assert s.generate("Hi", max_tokens=4, timeout=2.0) == expected


def test_dropped_stream_is_released_when_garbage_collected(random_model: Model) -> None:
    s = _greedy_session(random_model)
    expected = s.generate("Hi", max_tokens=4)
    g = s.stream("Tell me a story", max_tokens=64)
    next(g)
    error, _ = _timed_out_waiting(s, timeout=1.0)
    assert re.match(_only_slot_message(1.0), str(error)), str(error)
    waiter, outcome = _call_in_thread(lambda: s.generate("Hi", max_tokens=4))  # no timeout: no bound on the wait
    time.sleep(0.5)
    assert waiter.is_alive() and outcome == {}
    del g
    gc.collect()
    waiter.join(timeout=10)
    assert not waiter.is_alive() and outcome.get("result") == expected, outcome


async def test_async_timeout_bounds_the_wait_for_a_slot(random_model: Model) -> None:
    s = _greedy_session(random_model)
    expected = await s.agenerate("Hi", max_tokens=4)
    holder = s.astream_events("Tell me a story", max_tokens=64)
    await holder.__anext__()
    holder_task = asyncio.current_task()
    assert holder_task is not None
    start = time.monotonic()
    try:
        with pytest.raises(GenerationTimeoutError) as info:
            await asyncio.wait_for(s.agenerate("Hi", max_tokens=4, timeout=2.0), 8)
        elapsed = time.monotonic() - start
    finally:
        await holder.aclose()
    assert 1.5 <= elapsed <= 5
    assert re.match(
        r"timed out waiting for a slot after 2\.0 s: the session's only slot has been held for \d+\.\d s by an "
        rf"async stream in task '{re.escape(holder_task.get_name())}' that was not exhausted or closed",
        str(info.value),
    ), str(info.value)
    assert await s.agenerate("Hi", max_tokens=4, timeout=2.0) == expected


def test_two_slots_second_caller_not_blocked_third_times_out(random_model: Model) -> None:
    s = _greedy_session(random_model, n_parallel=2)
    expected = s.generate("Hi", max_tokens=4)
    first = s.stream("Tell me a story", max_tokens=64)
    next(first)
    second = s.stream("Once upon a time", max_tokens=64)
    try:
        thread, outcome = _call_in_thread(lambda: s.generate("Hi", max_tokens=4, timeout=2.0))
        thread.join(timeout=8)
        assert outcome.get("result") == expected and outcome["elapsed"] < 1.5, outcome
        next(second)
        error, elapsed = _timed_out_waiting(s)
    finally:
        first.close()
    assert 1.5 <= elapsed <= 5
    assert re.match(
        r"timed out waiting for a slot after 2\.0 s: all 2 slots of this session are taken: held for \d+\.\d s by a "
        r"stream in thread 'MainThread' that was not exhausted or closed, held for \d+\.\d s by a stream in thread "
        r"'MainThread' that was not exhausted or closed",
        str(error),
    ), str(error)
    assert s.generate("Hi", max_tokens=4, timeout=2.0) == expected
    second.close()
