"""Structured output through the grammar path: LangChain ``with_structured_output`` and
LlamaIndex ``structured_predict`` on the random-weight tiny model, whose answers are only
valid because the grammar makes them so."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import jsonschema
import pytest
from pydantic import BaseModel, Field

from mtp_llm.langchain import ChatMTP
from tests.helpers import THREADS


PROMPTS = ["Weather in Paris?", "Plan a trip", "Hello", "What should I pack for London in May?"]


class Forecast(BaseModel):
    """A weather forecast request."""

    city: Literal["Paris", "London", "Tokyo"]
    unit: Literal["celsius", "fahrenheit"]
    days: int = Field(ge=1, le=7)
    alerts: bool


SCHEMA = Forecast.model_json_schema()


def chat(paths: dict[str, Path]) -> ChatMTP:
    return ChatMTP(model_path=str(paths["random"]), n_threads=THREADS, n_ctx=2048, n_draft=4, temperature=0, max_tokens=96)


def test_langchain_json_schema_answers_are_instances_every_time(tiny_paths) -> None:
    structured = chat(tiny_paths).with_structured_output(Forecast)
    answers = [structured.invoke(p) for p in PROMPTS]
    assert all(isinstance(a, Forecast) for a in answers)
    for a in answers:
        jsonschema.validate(a.model_dump(), SCHEMA)


def test_langchain_dict_schema_and_include_raw(tiny_paths) -> None:
    structured = chat(tiny_paths).with_structured_output(SCHEMA, include_raw=True)
    for prompt in PROMPTS:
        out = structured.invoke(prompt)
        assert out["parsing_error"] is None
        jsonschema.validate(out["parsed"], SCHEMA)
        raw = out["raw"]
        assert raw.content.startswith("{") and " " not in raw.content.replace("Buenos Aires", "")  # compact JSON
        stats = raw.response_metadata["mtp_stats"]
        assert stats["drafts_forced"] > 0 and stats["drafts_forced_accepted"] > 0


def test_langchain_json_mode_and_function_calling(tiny_paths) -> None:
    model = chat(tiny_paths)
    for prompt in PROMPTS[:2]:
        assert isinstance(model.with_structured_output(None, method="json_mode").invoke(prompt), dict)
        called = model.with_structured_output(Forecast, method="function_calling").invoke(prompt)
        assert isinstance(called, Forecast)


def test_langchain_rejects_an_unknown_method(tiny_paths) -> None:
    from mtp_llm import InvalidOptionError

    with pytest.raises(InvalidOptionError, match="method must be"):
        chat(tiny_paths).with_structured_output(Forecast, method="xml")  # type: ignore[arg-type]


def test_llamaindex_structured_predict_and_structured_llm(tiny_paths) -> None:
    pytest.importorskip("llama_index.core")
    from llama_index.core.llms import ChatMessage
    from llama_index.core.prompts import PromptTemplate

    from mtp_llm.llamaindex import MTPLLM

    llm = MTPLLM(model_path=str(tiny_paths["random"]), n_threads=THREADS, n_ctx=2048, n_draft=4, temperature=0,
                 max_tokens=96)
    prompt = PromptTemplate("A forecast request about {topic}.")
    for topic in ["Paris", "the weekend", "skiing"]:
        result = llm.structured_predict(Forecast, prompt, topic=topic)
        assert isinstance(result, Forecast)
    structured = llm.as_structured_llm(Forecast)
    reply = structured.chat([ChatMessage(role="user", content="Weather in Tokyo?")])
    assert isinstance(reply.raw, Forecast)
    assert llm.session.stats().drafts_forced > 0


async def test_llamaindex_astructured_predict(tiny_paths) -> None:
    pytest.importorskip("llama_index.core")
    from llama_index.core.prompts import PromptTemplate

    from mtp_llm.llamaindex import MTPLLM

    llm = MTPLLM(model_path=str(tiny_paths["random"]), n_threads=THREADS, n_ctx=2048, n_draft=4, temperature=0,
                 max_tokens=96)
    result = await llm.astructured_predict(Forecast, PromptTemplate("About {topic}."), topic="rain")
    jsonschema.validate(result.model_dump(), SCHEMA)


def test_langchain_bind_tools_strict_calls_match_the_schema(tiny_paths) -> None:
    def get_forecast(city: Literal["Paris", "London", "Tokyo"], days: int) -> str:
        """Forecast for a city."""
        return city

    bound = chat(tiny_paths).bind_tools([get_forecast], tool_choice="any", strict=True)
    schema = {
        "type": "object",
        "properties": {"city": {"enum": ["Paris", "London", "Tokyo"]}, "days": {"type": "integer"}},
        "required": ["city", "days"],
    }
    for prompt in PROMPTS:
        calls = bound.invoke(prompt).tool_calls
        assert len(calls) == 1 and calls[0]["name"] == "get_forecast"
        jsonschema.validate(calls[0]["args"], schema)
