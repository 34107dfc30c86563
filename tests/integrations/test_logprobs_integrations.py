"""Log-probabilities where LangChain and LlamaIndex users look for them: OpenAI-shaped
``response_metadata["logprobs"]["content"]`` (chat), ``generation_info["logprobs"]`` (LLM),
LlamaIndex ``CompletionResponse.logprobs`` / ``ChatResponse.logprobs``."""

from __future__ import annotations

import pytest

from mtp_llm import Model, TokenEvent
from mtp_llm.langchain import ChatMTP, MTPLLM
from tests.helpers import THREADS, make_session



def reference(path, prompt: str, n: int, k: int) -> list[TokenEvent]:
    session = make_session(Model.load(path), n_draft=0)
    return [e for e in session.stream_events(prompt, max_tokens=n, temp=0, logprobs=True, top_logprobs=k) if isinstance(e, TokenEvent)]


def test_langchain_chat_invoke_and_stream_carry_openai_shaped_logprobs(tiny_paths) -> None:
    path = str(tiny_paths["random"])
    chat = ChatMTP(model_path=path, n_threads=THREADS, n_ctx=1024, n_draft=3, temperature=0, max_tokens=12,
                   logprobs=True, top_logprobs=2)
    message = chat.invoke("Hello")
    content = message.response_metadata["logprobs"]["content"]
    assert len(content) == message.response_metadata["mtp_stats"]["tokens_emitted"]
    first = content[0]
    assert set(first) == {"token", "bytes", "logprob", "top_logprobs"}
    assert bytes(first["bytes"]).decode("utf-8", errors="replace") == first["token"]
    assert len(first["top_logprobs"]) == 2 and first["top_logprobs"][0]["logprob"] == pytest.approx(first["logprob"])
    streamed = None
    for chunk in chat.stream("Hello"):
        streamed = chunk if streamed is None else streamed + chunk
    assert streamed is not None
    assert [e["logprob"] for e in streamed.response_metadata["logprobs"]["content"]] == pytest.approx(
        [e["logprob"] for e in content], abs=1e-6
    )


def test_langchain_llm_generation_info_logprobs_match_the_engine(tiny_paths) -> None:
    path = tiny_paths["random"]
    llm = MTPLLM(model_path=str(path), n_threads=THREADS, n_ctx=1024, n_draft=3, temperature=0, max_tokens=10,
                 logprobs=True)
    result = llm.generate(["Hello"])
    content = result.generations[0][0].generation_info["logprobs"]["content"]
    want = reference(path, "Hello", 10, 0)
    assert [e["logprob"] for e in content] == pytest.approx([e.logprob for e in want], abs=1e-4)
    assert "logprobs" not in (MTPLLM(model_path=str(path), n_threads=THREADS, n_ctx=1024, temperature=0,
                                     max_tokens=4).generate(["Hello"]).generations[0][0].generation_info or {})


def test_llamaindex_completion_and_chat_logprobs(tiny_paths) -> None:
    pytest.importorskip("llama_index.core")
    from llama_index.core.llms import ChatMessage

    from mtp_llm.llamaindex import MTPLLM as LlamaIndexMTPLLM

    path = tiny_paths["random"]
    llm = LlamaIndexMTPLLM(model_path=str(path), n_threads=THREADS, n_ctx=1024, n_draft=3, temperature=0,
                           max_tokens=10, top_logprobs=3)
    response = llm.complete("Hello")
    want = reference(path, "Hello", 10, 3)
    assert response.logprobs is not None and len(response.logprobs) == len(want)
    for per_token, event in zip(response.logprobs, want):
        assert per_token[0].logprob == pytest.approx(event.logprob, abs=1e-4)
        assert len(per_token) == 1 + 3
    chat = llm.chat([ChatMessage(role="user", content="Hello")])
    assert chat.logprobs is not None and all(len(t) == 4 for t in chat.logprobs)
    plain = LlamaIndexMTPLLM(model_path=str(path), n_threads=THREADS, n_ctx=1024, temperature=0, max_tokens=4)
    assert plain.complete("Hello").logprobs is None
