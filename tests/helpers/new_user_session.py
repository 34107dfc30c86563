"""A new user's session, scripted: the snippets of docs/langchain.md and docs/llamaindex.md, 50 cancelled
async calls, a stream left open while another caller waits with ``timeout=2``, and the mistakes a new user
makes. Run as ``python -m tests.helpers.new_user_session WORKDIR`` (WORKDIR holds the docs' ``model.gguf``):
it prints one line per provoked error (its class and message) and "done"; it must print nothing to stderr.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def run_page_snippets(page: str, workdir: Path) -> None:
    from tests.docs.page_fixtures import fixture_for
    from tests.docs.test_snippets import page_snippets

    namespace: dict[str, object] = {"__name__": "__main__"}
    with fixture_for(page)(workdir):
        for snippet in page_snippets((ROOT / page).read_text()):
            exec(compile(snippet.code, f"{page}:{snippet.line}", "exec"), namespace)


async def cancel_fifty() -> None:
    from mtp_llm.langchain import ChatMTP

    chat = ChatMTP(temperature=0, max_tokens=64)

    async def consume() -> None:
        async for _ in chat.astream("Tell me a story about the sea."):
            pass

    for k in range(50):
        task = asyncio.create_task(consume())
        await asyncio.sleep(0.002 * (k % 10))
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
    assert (await chat.ainvoke("Hi", max_tokens=4)).content


def abandoned_stream() -> None:
    from mtp_llm import GenerationTimeoutError, MTP, Model

    session = MTP(Model.load_default())
    stream = session.stream("Tell me a story", max_tokens=64)
    next(stream)
    caught: list[BaseException] = []

    def second_caller() -> None:
        try:
            session.generate("Hi", max_tokens=4, timeout=2.0)
        except GenerationTimeoutError as error:
            caught.append(error)

    other = threading.Thread(target=second_caller)
    other.start()
    other.join(10)
    (error,) = caught
    report(error)
    del stream
    gc.collect()
    assert session.generate("Hi", max_tokens=4, timeout=2.0)


def report(error: BaseException) -> None:
    print(f"{type(error).__name__}: {str(error).splitlines()[0]}")


def provoke(action: Callable[[], Any]) -> None:
    from mtp_llm import MTPError

    try:
        action()
    except MTPError as error:
        report(error)
    else:
        raise AssertionError(f"{action} raised nothing")


def mistakes(workdir: Path) -> None:
    from llama_index.core.prompts import PromptTemplate
    from pydantic import BaseModel

    from mtp_llm import MTP, Model
    from mtp_llm.langchain import ChatMTP
    from mtp_llm.llamaindex import MTPLLM

    class City(BaseModel):
        name: str
        country: str

    chat = ChatMTP(temperature=0)
    index_llm = MTPLLM(temperature=0)
    provoke(lambda: ChatMTP(num_predict=8))
    provoke(lambda: MTPLLM(temperatur=0.1))
    provoke(lambda: ChatMTP(n_ctx=-1))
    provoke(lambda: chat.invoke("Hi", max_token=8))
    provoke(lambda: chat.with_structured_output(City).invoke("Paris is the capital of France.", max_tokens=5))
    provoke(lambda: index_llm.structured_predict(City, PromptTemplate("{x}"), llm_kwargs={"max_tokens": 5}, x="Paris"))
    provoke(lambda: chat.invoke("Hi", grammar='root ::= ("a"'))
    provoke(lambda: chat.bind_tools([], tool_choice="get_weather"))
    provoke(lambda: MTP(Model.load_default(), n_ctx=100))
    provoke(lambda: Model.load(workdir / "missing.gguf"))


def main() -> None:
    workdir = Path(sys.argv[1]).resolve()
    os.chdir(workdir)
    for page in ("docs/langchain.md", "docs/llamaindex.md"):
        run_page_snippets(page, workdir)
    asyncio.run(cancel_fifty())
    abandoned_stream()
    mistakes(workdir)
    gc.collect()
    time.sleep(0.1)
    print("done")


if __name__ == "__main__":
    main()
