"""Parallel sequences (n_parallel): several generations share one session's contexts; each
step drafts and verifies all running ones in shared batches. Every call's tokens and
counters equal what it gives alone on a one-slot session, whatever the others do."""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
from pathlib import Path
from typing import Any

import pytest

from mtp_llm import (
    MTP,
    ContextOverflowError,
    GenerationTimeoutError,
    InvalidOptionError,
    Model,
    SessionBusyError,
    TokenEvent,
    _core,
)

from tests.helpers import THREADS, LoopTicker
from tests.helpers import SESSION_CASES as CASES

PROMPTS = [
    "Once upon a time",
    "The quick brown fox",
    "In a hole in the ground there lived",
    "It was the best of times,",
    "Call me Ishmael.",
    "All happy families are alike;",
    "A screaming comes across the sky.",
    "Happy families are all alike",
]
LONG = " ".join(f"word{i % 17}" for i in range(40))  # several prompt chunks at n_batch=64


def open_sessions(tiny_paths: dict[str, Path], case: str, n_parallel: int = 4, **options: Any) -> tuple[MTP, MTP]:
    """A session with `n_parallel` slots and a one-slot session with the same settings."""
    spec = dict(CASES[case], **options)
    target = Model.load(tiny_paths[spec.pop("target")])
    draft = Model.load(tiny_paths[spec.pop("draft")]) if "draft" in spec else None
    spec.setdefault("n_ctx", 512)
    common = dict(draft_model=draft, n_threads=THREADS, **spec)
    parallel = MTP(target, n_parallel=n_parallel, **dict(common, n_ctx=spec["n_ctx"] * n_parallel))
    return parallel, MTP(target, **common)


def token_ids(session: MTP, prompt: str, **opts: Any) -> list[int]:
    return [e.id for e in session.stream_events(prompt, **opts) if isinstance(e, TokenEvent)]


def run_concurrently(session: MTP, prompts: list[str], **opts: Any) -> tuple[list[list[int]], list[Any]]:
    """Each prompt in its own thread, all started together; their tokens and call stats."""
    tokens: list[list[int]] = [[] for _ in prompts]
    stats: list[Any] = [None] * len(prompts)
    errors: list[BaseException] = []
    start = threading.Barrier(len(prompts))

    def work(i: int) -> None:
        try:
            start.wait()
            for event in session.stream_events(prompts[i], **opts):
                if isinstance(event, TokenEvent):
                    tokens[i].append(event.id)
                elif type(event).__name__ == "DoneEvent":
                    stats[i] = event.stats  # type: ignore[attr-defined]
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a concurrent call hung"
    assert not errors, errors
    return tokens, stats


@pytest.mark.parametrize("case", list(CASES))
def test_concurrent_greedy_calls_equal_sequential_ones(tiny_paths: dict[str, Path], case: str) -> None:
    parallel, single = open_sessions(tiny_paths, case)
    prompts = PROMPTS[:4]
    expected = [token_ids(single, p, max_tokens=32, temp=0) for p in prompts]
    for _ in range(2):  # the second round reuses (or replaces) what the slots hold
        got, _ = run_concurrently(parallel, prompts, max_tokens=32, temp=0)
        assert got == expected, case


@pytest.mark.parametrize("case", ["dense", "sidecar", "hybrid rs", "dense, llama.cpp's driver"])
def test_prompts_longer_than_a_ubatch(tiny_paths: dict[str, Path], case: str) -> None:
    # llama.cpp #27572: acceptance collapsed with several slots and multi-ubatch prompts.
    parallel, single = open_sessions(tiny_paths, case, n_batch=64)
    prompts = [f"{LONG} {p}" for p in PROMPTS[:4]]
    assert all(len(parallel.tokenize_prompt(p)) > 3 * 64 for p in prompts)
    expected = [token_ids(single, p, max_tokens=24, temp=0) for p in prompts]
    got, _ = run_concurrently(parallel, prompts, max_tokens=24, temp=0)
    assert got == expected


@pytest.mark.parametrize("name", ["accept100", "accept33"])
def test_per_call_stats_are_exact(tiny_paths: dict[str, Path], name: str) -> None:
    target = Model.load(tiny_paths[name])
    parallel = MTP(target, n_parallel=4, n_ctx=2048, n_draft=3, n_threads=THREADS)
    single = MTP(target, n_ctx=512, n_draft=3, n_threads=THREADS)
    prompts = [f"{LONG} {p}" for p in PROMPTS[:4]]
    expected = []
    # 200 tokens: long enough that the four threads' calls overlap even when a busy machine starts them apart.
    for p in prompts:
        single.generate(p, max_tokens=200, temp=0)
        expected.append(single.last_stats)
    got, stats = run_concurrently(parallel, prompts, max_tokens=200, temp=0)
    rate = 1.0 if name == "accept100" else 1 / 3
    for s, e in zip(stats, expected, strict=True):
        fields = ("drafts_generated", "drafts_accepted", "tokens_emitted", "iters", "prompt_tokens")
        assert {f: getattr(s, f) for f in fields} == {f: getattr(e, f) for f in fields}
        assert s.acceptance_rate_per_position == e.acceptance_rate_per_position
        assert s.draft_length_counts == e.draft_length_counts
        assert s.acceptance_rate == e.acceptance_rate == pytest.approx(rate, abs=0.02)  # the last draft is cut short
    total = parallel.stats()
    assert total.drafts_generated == sum(s.drafts_generated for s in stats)
    assert total.drafts_accepted == sum(s.drafts_accepted for s in stats)
    assert total.tokens_emitted == sum(s.tokens_emitted for s in stats)
    assert total.generations == 4
    assert all(s.verify_batches == s.iters for s in stats)
    assert 1.0 < total.mean_calls_per_batch <= 4.0


def test_one_step_advances_every_running_slot(tiny_paths: dict[str, Path]) -> None:
    """The rounds are shared: one caller's step drafts and verifies every running slot."""
    session = MTP(Model.load(tiny_paths["accept100"]), n_parallel=3, n_ctx=768, n_draft=3, n_threads=THREADS)
    native = session._native
    options = session.options(max_tokens=20, temp=0).to_native()
    slots = [native.begin(session.tokenize_prompt(p), options) for p in PROMPTS[:3]]
    assert sorted(slots) == [0, 1, 2]
    native.step(slots[0])  # every slot's prompt
    assert [native.call_stats(s)["iters"] for s in slots] == [0, 0, 0]
    tokens, finished, _ = native.step(slots[0])  # one draft/verify round of all three
    assert len(tokens) == 4 and not finished
    assert [native.call_stats(s)["iters"] for s in slots] == [1, 1, 1]
    assert [len(native.step(s)[0]) for s in slots[1:]] == [4, 4]  # already there: no new round
    assert [native.call_stats(s)["iters"] for s in slots] == [1, 1, 1]
    total = session.stats()
    assert (total.iters, total.verify_batches, total.mean_calls_per_batch) == (3, 1, 3.0)
    with pytest.raises(SessionBusyError, match="all 3 slots"):
        native.begin(session.tokenize_prompt("one more"), options)
    for s in slots:
        native.end(s)
    assert not native.active


def drive(native: Any, slots: list[int]) -> dict[int, list[int]]:
    """Steps every slot in turn until each call finishes; their token ids."""
    tokens: dict[int, list[int]] = {s: [] for s in slots}
    running = set(slots)
    while running:
        for s in sorted(running):
            out, finished, _ = native.step(s)
            tokens[s] += [t[0] for t in out]
            if finished:
                native.end(s)
                running.discard(s)
    return tokens


def test_calls_in_slots_apart_verify_in_one_pass(tiny_paths: dict[str, Path]) -> None:
    """llama.cpp decodes sequences 0 and 2 in a pass each (its sequences must be adjacent): the
    session pads sequence 1 so that each verify and each head decode stays one pass, takes the
    rows out of both caches after, and no call sees a difference."""
    target = Model.load(tiny_paths["accept100"])
    session = MTP(target, n_parallel=3, n_ctx=768, n_draft=3, n_threads=THREADS)
    single = MTP(target, n_ctx=256, n_draft=3, n_threads=THREADS)
    native = session._native
    options = session.options(max_tokens=20, temp=0).to_native()
    slots = [native.begin(session.tokenize_prompt(p), options) for p in PROMPTS[:3]]
    assert slots == [0, 1, 2]
    native.step(slots[0])  # every slot's prompt
    native.end(slots[1])  # slot 1 keeps its prompt, idle
    session.reset_stats()
    tokens = drive(native, [0, 2])
    assert [tokens[0], tokens[2]] == [token_ids(single, p, max_tokens=20, temp=0) for p in (PROMPTS[0], PROMPTS[2])]
    total = session.stats()
    assert (total.verify_batches, total.iters) == (5, 10)  # 4 tokens a round (every draft accepted)
    # Sequence 1's padding, each round: the verify's 4 rows; in the head's decodes, the first
    # takes as many rows as each running sequence's catch-up plus its draft row (1 in the
    # first round, whose rows the prompt already put in the head, then 3 + 1), the next two 1.
    assert total.padding_rows == 5 * 4 + (1 + 1 + 1) + 4 * (4 + 1 + 1)
    # Slot 1 still holds its prompt, unharmed: the same prompt again reuses it and decodes the same.
    again = native.begin(session.tokenize_prompt(PROMPTS[1]), options)
    assert again == 1
    assert drive(native, [1])[1] == token_ids(single, PROMPTS[1], max_tokens=20, temp=0)
    assert native.call_stats(1)["prompt_tokens_cached"] == len(session.tokenize_prompt(PROMPTS[1])) - 1


def test_no_padding_switch_leaves_llama_cpp_to_split(tiny_paths: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """MTP_LLM_NO_PADDING (read when the session is made) measures what padding saves: the same
    tokens, no padding rows."""
    monkeypatch.setenv("MTP_LLM_NO_PADDING", "1")
    target = Model.load(tiny_paths["accept100"])
    session = MTP(target, n_parallel=3, n_ctx=768, n_draft=3, n_threads=THREADS)
    monkeypatch.delenv("MTP_LLM_NO_PADDING")
    single = MTP(target, n_ctx=256, n_draft=3, n_threads=THREADS)
    native = session._native
    options = session.options(max_tokens=20, temp=0).to_native()
    slots = [native.begin(session.tokenize_prompt(p), options) for p in PROMPTS[:3]]
    native.step(slots[0])
    native.end(slots[1])
    tokens = drive(native, [0, 2])
    assert [tokens[0], tokens[2]] == [token_ids(single, p, max_tokens=20, temp=0) for p in (PROMPTS[0], PROMPTS[2])]
    assert session.stats().padding_rows == 0


def test_drafts_of_different_lengths_verify_in_one_pass(tiny_paths: dict[str, Path]) -> None:
    """A call near its max_tokens drafts fewer tokens than its neighbour: its rows are padded to
    the neighbour's count (llama.cpp splits sequences of unequal row counts into passes)."""
    target = Model.load(tiny_paths["accept100"])
    session = MTP(target, n_parallel=2, n_ctx=512, n_draft=3, n_threads=THREADS)
    single = MTP(target, n_ctx=256, n_draft=3, n_threads=THREADS)
    native = session._native
    short, long = session.options(max_tokens=9, temp=0), session.options(max_tokens=20, temp=0)
    slots = [native.begin(session.tokenize_prompt(PROMPTS[0]), short.to_native()),
             native.begin(session.tokenize_prompt(PROMPTS[1]), long.to_native())]
    assert slots == [0, 1]
    tokens = drive(native, slots)
    assert tokens[0] == token_ids(single, PROMPTS[0], max_tokens=9, temp=0)
    assert tokens[1] == token_ids(single, PROMPTS[1], max_tokens=20, temp=0)
    # Rounds of 4 rows each, then the short call's last token (1 row, no room to draft) beside
    # the long call's 4: 3 padding rows; then the long call alone. (The head's decodes need none:
    # both calls always catch up and draft alike, and the short one drafts nothing at the end.)
    assert session.stats().padding_rows == 3


def test_more_calls_than_slots_wait_their_turn(tiny_paths: dict[str, Path]) -> None:
    parallel, single = open_sessions(tiny_paths, "dense", n_parallel=2)
    expected = [token_ids(single, p, max_tokens=16, temp=0) for p in PROMPTS[:6]]
    got, _ = run_concurrently(parallel, PROMPTS[:6], max_tokens=16, temp=0)
    assert got == expected
    assert parallel.stats().generations == 6


async def test_async_calls_share_the_session_without_blocking_the_loop(tiny_paths: dict[str, Path]) -> None:
    parallel, single = open_sessions(tiny_paths, "dense", n_parallel=3)
    prompts = PROMPTS[:6]
    expected = [single.generate(p, max_tokens=24, temp=0) for p in prompts]
    async with LoopTicker(interval=0.001) as ticker:
        got = await asyncio.gather(*(parallel.agenerate(p, max_tokens=24, temp=0) for p in prompts))
    assert list(got) == expected
    assert ticker.ticks >= 10


@pytest.mark.parametrize("together", [True, False], ids=["together", "one after the other"])
@pytest.mark.parametrize("case", ["dense", "sidecar", "dense, llama.cpp's driver", "hybrid rs", "hybrid checkpoint"])
def test_a_slot_keeps_its_conversation(tiny_paths: dict[str, Path], case: str, together: bool) -> None:
    """Prompt cache per slot: a follow-up goes to the slot that holds its history.

    The two conversations share a long prefix. Run one after the other, the second must
    not take the first one's slot (it would cut that conversation): it goes to the free
    slot, starting from a copy of the shared prefix where the target can roll back.
    """
    parallel, single = open_sessions(tiny_paths, case, n_parallel=2)
    histories = [f"{LONG} {p}" for p in PROMPTS[:2]]
    if together:
        answers, _ = run_concurrently(parallel, histories, max_tokens=16, temp=0)
    else:
        firsts = [list(parallel.stream_events(h, max_tokens=16, temp=0)) for h in histories]
        answers = [[e.id for e in events if isinstance(e, TokenEvent)] for events in firsts]
        second_cached = firsts[1][-1].stats.prompt_tokens_cached
        assert second_cached == (0 if case.startswith("hybrid") else pytest.approx(shared_len(parallel), abs=1))
    follow_ups = [h + parallel.model.detokenize(a) + " And then?" for h, a in zip(histories, answers, strict=True)]
    expected = [token_ids(single, p, max_tokens=16, temp=0) for p in follow_ups]
    got, stats = run_concurrently(parallel, follow_ups, max_tokens=16, temp=0)
    assert got == expected
    assert all(s.prompt_tokens_cached > shared_len(parallel) for s in stats)


def shared_len(session: MTP) -> int:
    """Tokens of the prefix every conversation of these tests shares."""
    return len(session.model.tokenize(LONG))


async def _tokens_async(session: MTP, prompt: str, **opts: Any) -> list[int]:
    return [e.id async for e in session.astream_events(prompt, **opts) if isinstance(e, TokenEvent)]


async def test_cancelling_one_call_leaves_the_others_alone(tiny_paths: dict[str, Path]) -> None:
    parallel, single = open_sessions(tiny_paths, "dense", n_parallel=3)
    expected = [token_ids(single, p, max_tokens=40, temp=0) for p in PROMPTS[:2]]
    seen = asyncio.Event()

    async def victim() -> None:
        async for event in parallel.astream_events(PROMPTS[5], max_tokens=400, temp=0):
            if isinstance(event, TokenEvent):
                seen.set()

    task = asyncio.create_task(victim())
    await seen.wait()
    survivors = [asyncio.create_task(_tokens_async(parallel, p, max_tokens=40, temp=0)) for p in PROMPTS[:2]]
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [await t for t in survivors] == expected
    assert not parallel._native.active


@pytest.mark.parametrize("case", ["dense", "hybrid rs"])
async def test_random_cancellations_and_timeouts(tiny_paths: dict[str, Path], case: str) -> None:
    """8 concurrent calls on 4 slots, some cancelled, timed out or abandoned at random
    points, repeated: no hang, no crash, and every call's tokens are its sequential output
    (all of it for the calls left alone)."""
    parallel, single = open_sessions(tiny_paths, case)
    expected = {p: token_ids(single, p, max_tokens=48, temp=0) for p in PROMPTS}
    rng = random.Random(1234)
    for _ in range(3):
        plan = [(p, rng.choice(["finish", "finish", "cancel", "timeout", "abandon"]), rng.randint(1, 20)) for p in PROMPTS]
        got: list[list[int]] = [[] for _ in plan]

        async def call(i: int) -> str:
            prompt, how, at = plan[i]
            opts: dict[str, Any] = {"max_tokens": 48, "temp": 0}
            if how == "timeout":
                opts["timeout"] = 0.003 * at
            try:
                async with contextlib.aclosing(parallel.astream_events(prompt, **opts)) as events:
                    async for event in events:
                        if isinstance(event, TokenEvent):
                            got[i].append(event.id)
                            if how == "abandon" and len(got[i]) >= at:
                                return "abandoned"
            except GenerationTimeoutError:
                return "timed out"
            return "finished"

        tasks = [asyncio.create_task(call(i)) for i in range(len(plan))]
        for i, (_, how, at) in enumerate(plan):
            if how == "cancel":
                asyncio.get_running_loop().call_later(0.002 * at, tasks[i].cancel)
        outcomes = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=120)
        for i, (prompt, how, _) in enumerate(plan):
            assert got[i] == expected[prompt][: len(got[i])], (prompt, how)
            if how == "finish":
                assert outcomes[i] == "finished" and got[i] == expected[prompt]
            else:
                assert outcomes[i] in ("finished", "abandoned", "timed out") or isinstance(outcomes[i], asyncio.CancelledError)
        assert not parallel._native.active
    # Whatever happened before, the session still serves every prompt exactly.
    got_after, _ = run_concurrently(parallel, PROMPTS[:4], max_tokens=48, temp=0)
    assert got_after == [expected[p] for p in PROMPTS[:4]]


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"n_parallel": 0}, "n_parallel must be between 1 and 256"),
        ({"n_parallel": -2}, "n_parallel must be between 1 and 256"),
        ({"n_parallel": 300, "n_ctx": 300 * 256}, "n_parallel must be between 1 and 256"),
        ({"n_parallel": 1.5}, "n_parallel must be an integer"),
        ({"n_parallel": "4"}, "n_parallel must be an integer"),
        ({"n_parallel": 9, "n_ctx": 2048}, r"n_parallel=9 needs n_ctx >= 2304 .* at most n_parallel=8"),
        ({"n_parallel": 4, "n_ctx": 1024, "n_batch": 8, "n_draft": 3}, r"n_batch must be at least n_parallel \* \(n_draft \+ 1\) = 16"),
    ],
)
def test_bad_n_parallel(random_model: Model, options: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidOptionError, match=match):
        MTP(random_model, n_threads=THREADS, **options)


def test_slot_sizes_and_overflow(random_model: Model) -> None:
    session = MTP(random_model, n_parallel=4, n_ctx=2048, n_threads=THREADS)
    assert (session.n_parallel, session.n_ctx, session.n_ctx_slot) == (4, 2048, 512)
    with pytest.raises(ContextOverflowError, match=r"exceeds a slot's context \(n_ctx / n_parallel = 512\)"):
        session.generate("hello", max_tokens=600)
    with pytest.raises(InvalidOptionError, match="slot 7 does not exist"):
        session._native.step(7)
    assert isinstance(session._native, _core.Session)


# ------------------------------------------------------------------ integrations --


def _integration_kwargs(tiny_paths: dict[str, Path], **extra: Any) -> dict[str, Any]:
    return dict(model_path=str(tiny_paths["random"]), n_threads=THREADS, n_draft=3, max_tokens=48, **extra)


def test_langchain_batch_runs_in_parallel(tiny_paths: dict[str, Path]) -> None:
    from mtp_llm.langchain import MTPLLM, ChatMTP

    prompts = PROMPTS[:4]
    alone = MTPLLM(**_integration_kwargs(tiny_paths, n_ctx=512, temperature=0))
    expected = [alone.invoke(p) for p in prompts]
    llm = MTPLLM(**_integration_kwargs(tiny_paths, n_ctx=2048, n_parallel=4, temperature=0))
    llm.client.reset_stats()
    result = llm.generate(prompts)  # what batch() calls: every prompt in one call
    assert [g[0].text for g in result.generations] == expected
    assert [g[0].generation_info["mtp_stats"]["tokens_emitted"] for g in result.generations] == [48] * 4
    assert llm.batch(prompts) == expected
    # The calls shared verify decodes (how many depends on the threads' timing: a busy machine
    # serialises some of them).
    assert llm.client.stats().mean_calls_per_batch > 1.0

    chat_alone = ChatMTP(**_integration_kwargs(tiny_paths, n_ctx=512, temperature=0))
    chat_expected = [chat_alone.invoke(p).content for p in prompts]
    chat = ChatMTP(**_integration_kwargs(tiny_paths, n_ctx=2048, n_parallel=4, temperature=0))
    chat.client.reset_stats()
    assert [m.content for m in chat.batch(prompts)] == chat_expected
    assert chat.client.stats().mean_calls_per_batch > 1.0  # the calls shared verify decodes (some, on a busy machine)


async def test_langchain_abatch_and_concurrent_astream(tiny_paths: dict[str, Path]) -> None:
    from mtp_llm.langchain import MTPLLM, ChatMTP

    prompts = PROMPTS[:4]
    alone = MTPLLM(**_integration_kwargs(tiny_paths, n_ctx=512, temperature=0))
    expected = [alone.invoke(p) for p in prompts]
    llm = MTPLLM(**_integration_kwargs(tiny_paths, n_ctx=2048, n_parallel=4, temperature=0))
    llm.client.reset_stats()
    async with LoopTicker(interval=0.001) as ticker:
        assert await llm.abatch(prompts) == expected
        chat = ChatMTP(**_integration_kwargs(tiny_paths, n_ctx=2048, n_parallel=4, temperature=0))

        async def streamed(p: str) -> str:
            return "".join([str(c.content) async for c in chat.astream(p)])

        chat_texts = await asyncio.gather(*(streamed(p) for p in prompts))
    assert ticker.ticks >= 10
    chat_alone = ChatMTP(**_integration_kwargs(tiny_paths, n_ctx=512, temperature=0))
    assert list(chat_texts) == [chat_alone.invoke(p).content for p in prompts]
    assert llm.client.stats().mean_calls_per_batch > 1.0  # the calls shared verify decodes (some, on a busy machine)
    assert chat.client.stats().mean_calls_per_batch > 1.0  # the calls shared verify decodes (some, on a busy machine)


async def test_llamaindex_async_gather_runs_in_parallel(tiny_paths: dict[str, Path]) -> None:
    from mtp_llm.llamaindex import MTPLLM

    prompts = PROMPTS[:4]
    alone = MTPLLM(**_integration_kwargs(tiny_paths, n_ctx=512, temperature=0.0))
    expected = [alone.complete(p).text for p in prompts]
    llm = MTPLLM(**_integration_kwargs(tiny_paths, n_ctx=2048, n_parallel=4, temperature=0.0))
    llm.session.reset_stats()
    responses = await asyncio.gather(*(llm.acomplete(p) for p in prompts))
    assert [r.text for r in responses] == expected
    assert [r.additional_kwargs["mtp_stats"]["tokens_emitted"] for r in responses] == [48] * 4
    assert llm.session.stats().mean_calls_per_batch > 1.0  # the calls shared verify decodes (some, on a busy machine)


def test_each_call_keeps_its_own_options(tiny_paths: dict[str, Path]) -> None:
    """Grammar, stop strings, per-call draft length and seeded sampling of one call are its own:
    run together, each gives what it gives alone."""
    parallel, single = open_sessions(tiny_paths, "dense")
    calls: list[tuple[str, dict[str, Any]]] = [
        (PROMPTS[0], {"grammar": 'root ::= ("ab" | "cd")+', "max_tokens": 20, "temp": 0}),
        (PROMPTS[1], {"stop": ["e"], "max_tokens": 40, "temp": 0}),
        (PROMPTS[2], {"n_draft": 0, "max_tokens": 30, "temp": 0}),
        (PROMPTS[3], {"temp": 0.9, "seed": 42, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "max_tokens": 30}),
    ]
    expected = [single.generate(p, **o) for p, o in calls]
    got: list[str] = [""] * len(calls)
    start = threading.Barrier(len(calls))

    def work(i: int) -> None:
        start.wait()
        got[i] = parallel.generate(calls[i][0], **calls[i][1])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert got == expected
    assert set(got[0]) <= set("abcd") and "e" not in got[1]


@pytest.mark.parametrize("case", ["dense", "hybrid rs", "dense, llama.cpp's driver", "hybrid checkpoint"])
def test_saved_conversations_move_between_slots(tiny_paths: dict[str, Path], case: str) -> None:
    """Three conversations on two slots: the one pushed out is saved and comes back into
    whichever slot is free, with its history reused and the fresh session's output."""
    parallel, single = open_sessions(tiny_paths, case, n_parallel=2)
    histories = [f"{p} " * 10 for p in PROMPTS[:3]]  # nothing in common: a new one pushes out the oldest
    answers = [parallel.generate(h, max_tokens=12, temp=0) for h in histories]
    for turn in range(2):
        # Both slots busy with the 2nd and 3rd conversations while the 1st comes back.
        prompts = [histories[i] + answers[i] + f" Turn {turn}." for i in (1, 2, 0)]
        expected = [token_ids(single, p, max_tokens=12, temp=0) for p in prompts]
        got, stats = run_concurrently(parallel, prompts[:2], max_tokens=12, temp=0)
        got_last, stats_last = run_concurrently(parallel, prompts[2:], max_tokens=12, temp=0)
        assert got + got_last == expected
        assert all(s.prompt_tokens_cached > 100 for s in stats + stats_last), [s.prompt_tokens_cached for s in stats + stats_last]
