"""Abandoned, cancelled and timed-out generations leave the session reusable; threads and tasks serialize."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from mtp_llm import MTP, GenerationCancelledError, GenerationTimeoutError, Model, SessionBusyError, TokenEvent

from tests.helpers import LoopTicker, make_session


def reference(session: MTP) -> str:
    return session.generate("Hello", max_tokens=24, temp=0)


def test_break_out_of_stream_then_reuse(random_session: MTP) -> None:
    expected = reference(random_session)
    for stop_after in (0, 1, 5):
        for i, _ in enumerate(random_session.stream("Hello", max_tokens=200, temp=0)):
            if i >= stop_after:
                break
        assert reference(random_session) == expected


def test_close_and_drop_iterator_then_reuse(random_session: MTP) -> None:
    expected = reference(random_session)
    it = random_session.stream_events("Hello", max_tokens=200, temp=0)
    next(it)
    it.close()
    assert reference(random_session) == expected
    it = random_session.stream_events("Hello", max_tokens=200, temp=0)
    next(it)
    del it
    assert reference(random_session) == expected


def test_second_stream_in_same_thread_raises_busy(random_session: MTP) -> None:
    it = random_session.stream("Hello", max_tokens=50, temp=0)
    next(it)
    with pytest.raises(SessionBusyError, match="already running"):
        random_session.generate("Hello", max_tokens=5, temp=0)
    it.close()
    assert random_session.generate("Hello", max_tokens=5, temp=0)


def test_timeout_raises_and_session_stays_usable(random_model: Model) -> None:
    session = make_session(random_model, n_draft=3, n_ctx=4096)
    expected = reference(session)
    with pytest.raises(GenerationTimeoutError, match="timeout"):
        session.generate("Hello", max_tokens=4000, temp=0, timeout=0.05)
    assert reference(session) == expected


def test_cancel_from_another_thread(random_model: Model) -> None:
    session = make_session(random_model, n_draft=3, n_ctx=4096)
    expected = reference(session)
    timer = threading.Timer(0.05, session.cancel)
    timer.start()
    with pytest.raises(GenerationCancelledError):
        session.generate("Hello", max_tokens=4000, temp=0)
    timer.join()
    assert reference(session) == expected


def test_stats_readable_from_another_thread_while_streaming(random_model: Model) -> None:
    session = make_session(random_model, n_draft=3, n_ctx=2048)
    seen: list[int] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.append(session.stats().tokens_emitted)
            time.sleep(0.001)

    watcher = threading.Thread(target=watch)
    watcher.start()
    session.generate("Hello", max_tokens=1500, temp=0)
    done.set()
    watcher.join()
    assert seen == sorted(seen)
    assert any(0 < n < 1500 for n in seen)


def test_threads_share_one_session(random_model: Model) -> None:
    session = make_session(random_model, n_draft=2)
    prompts = ["Hello", "Once upon a time", "a", "The fox"]
    expected = {p: session.generate(p, max_tokens=20, temp=0) for p in prompts}
    results: dict[tuple[int, str], str] = {}

    def work(i: int) -> None:
        for p in prompts:
            results[(i, p)] = session.generate(p, max_tokens=20, temp=0)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive()
    assert all(results[(i, p)] == expected[p] for i in range(4) for p in prompts)


async def test_async_stream_keeps_event_loop_free(random_model: Model) -> None:
    session = make_session(random_model, n_draft=2, n_ctx=2048)
    async with LoopTicker() as ticker:
        events = session.astream_events("Hello", max_tokens=400, temp=0)
        pieces = [e.text async for e in events if isinstance(e, TokenEvent)]
    assert "".join(pieces) == session.generate("Hello", max_tokens=400, temp=0)
    assert ticker.ticks > 50


async def test_async_tasks_share_one_session(random_model: Model) -> None:
    session = make_session(random_model, n_draft=2)
    prompts = ["Hello", "Once upon a time", "a"]
    expected = [session.generate(p, max_tokens=16, temp=0) for p in prompts]
    got = await asyncio.gather(*(session.agenerate(p, max_tokens=16, temp=0) for p in prompts * 2))
    assert list(got) == expected * 2


async def test_async_cancel_stops_native_loop(random_model: Model) -> None:
    session = make_session(random_model, n_draft=3, n_ctx=4096)
    expected = reference(session)
    task = asyncio.create_task(session.agenerate("Hello", max_tokens=4000, temp=0))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not session._native.active
    assert await session.agenerate("Hello", max_tokens=24, temp=0) == expected


def test_keyboard_interrupt_from_a_signal_leaves_session_reusable(random_model: Model) -> None:
    import signal

    session = make_session(random_model, n_draft=3, n_ctx=4096)
    expected = reference(session)

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        with pytest.raises(KeyboardInterrupt):
            session.generate("Hello", max_tokens=4000, temp=0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert not session._native.active
    assert reference(session) == expected


def test_random_cancellation_points_match_fresh_session(random_model: Model) -> None:
    import random

    rng = random.Random(1234)
    session = make_session(random_model, n_draft=3)
    fresh = make_session(random_model, n_draft=3)
    prompts = ["Hello", "Once upon a time", "The fox"]
    for _ in range(20):
        prompt = rng.choice(prompts)
        how = rng.choice(["break", "close", "drop"])
        it = session.stream_events(prompt, max_tokens=60, temp=0)
        for _ in range(rng.randint(0, 30)):
            if next(it, None) is None:
                break
        if how == "close":
            it.close()
        del it
        check = rng.choice(prompts)
        assert session.generate(check, max_tokens=20, temp=0) == fresh.generate(check, max_tokens=20, temp=0)


def test_quick_soak_has_no_leak(tiny_paths) -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    try:
        from soak import soak
    finally:
        sys.path.pop(0)
    result = soak(str(tiny_paths["random"]), iterations=150, warmup=30)
    assert result["growth_mb"] < 5.0, result
