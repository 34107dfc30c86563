"""Where the integrations meet their users: options by other projects' names, structured output that
does not parse, token counting with the model's tokenizer, and an agent's answering turn reusing the
calling turn's cached prompt. Real engine, built-in model (and the project's tiny models)."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.exceptions import OutputParserException
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, trim_messages
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel

from mtp_llm import STATS_KEY, InvalidOptionError, Model, StructuredOutputError
from mtp_llm._integration import json_object, parse_structured
from mtp_llm.chat import json_schema_grammar
from mtp_llm.langchain import MTPLLM, ChatMTP, MTPEmbeddings, StructuredOutputParserError
from mtp_llm.llamaindex import MTPLLM as IndexLLM
from mtp_llm.llamaindex import MTPEmbedding

from tests.helpers import THREADS


@pytest.fixture(scope="module")
def chat() -> ChatMTP:
    return ChatMTP(n_threads=THREADS, n_ctx=2048, temperature=0, max_tokens=80)


@pytest.fixture(scope="module")
def index_llm() -> IndexLLM:
    return IndexLLM(n_threads=THREADS, n_ctx=2048, temperature=0, max_tokens=80)


@tool
def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return f"It is sunny in {city}."


class City(BaseModel):
    name: str
    country: str


class Capital(BaseModel):
    zqx_code: int


# ------------------------------------------------------------ constructors --


@pytest.mark.parametrize(
    ("cls", "given", "named"),
    [
        (ChatMTP, {"num_predict": 8}, "'num_predict' (Ollama's name): use max_tokens"),
        (ChatMTP, {"n_predict": 8}, "'n_predict' (llama.cpp's name): use max_tokens"),
        (ChatMTP, {"temperatur": 0.1}, "'temperatur': did you mean temperature"),
        (MTPLLM, {"num_ctx": 4096}, "'num_ctx' (Ollama's name): use n_ctx"),
        (MTPLLM, {"max_retries": 2}, "'max_retries' (a local generation has no transient failure to retry"),
        (IndexLLM, {"num_ctx": 4096}, "'num_ctx' (Ollama's name): use n_ctx"),
        (IndexLLM, {"max_new_tokens": 8}, "'max_new_tokens' (transformers's name): use max_tokens"),
        (MTPEmbeddings, {"model": "x.gguf"}, "'model' (Ollama's name): use model_path"),
        (MTPEmbedding, {"n_thread": 2}, "'n_thread': did you mean n_threads"),
    ],
)
def test_unknown_constructor_options_are_refused_with_the_real_name(cls: type, given: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidOptionError) as caught:
        cls(**given)
    message = str(caught.value)
    assert message.startswith(f"{cls.__name__}() got unknown option {named}")
    assert "Valid options:" in message


@pytest.mark.parametrize(
    ("cls", "given", "detail"),
    [
        (ChatMTP, {"n_ctx": -5}, "n_ctx=-5: Input should be greater than or equal to"),
        (MTPLLM, {"temperature": "hot"}, "temperature='hot': Input should be a valid number"),
        (IndexLLM, {"n_draft": "many"}, "n_draft='many': Input should be a valid integer, unable to parse string as an integer, or Input should be 'auto'"),
        (MTPEmbedding, {"n_threads": 0}, "n_threads=0: Input should be greater than or equal to 1"),
    ],
)
def test_invalid_constructor_values_raise_mtp_errors_with_pydantics_detail(
    cls: type, given: dict[str, Any], detail: str
) -> None:
    with pytest.raises(InvalidOptionError) as caught:
        cls(**given)
    assert str(caught.value).startswith(f"{cls.__name__}() got an invalid option value: ")
    assert detail in str(caught.value)


def test_llamaindex_context_window_and_num_output_mean_what_llamaindex_means() -> None:
    llm = IndexLLM(context_window=4096, num_output=32, n_threads=THREADS)
    assert (llm.n_ctx, llm.max_tokens) == (4096, 32)
    assert (llm.context_window, llm.num_output) == (4096, 32)
    assert (llm.metadata.context_window, llm.metadata.num_output) == (4096, 32)
    assert llm.session.n_ctx == 4096
    with pytest.raises(InvalidOptionError, match=r"got context_window=4096 and n_ctx=1024: pass one"):
        IndexLLM(context_window=4096, n_ctx=1024)


# ------------------------------------------------------- structured output --


def test_structured_output_cut_by_max_tokens_says_so(chat: ChatMTP) -> None:
    with pytest.raises(StructuredOutputParserError) as caught:
        chat.with_structured_output(City).invoke("Paris is the capital of France.", max_tokens=5)
    error = caught.value
    assert isinstance(error, StructuredOutputError) and isinstance(error, OutputParserException)
    assert str(error).startswith(
        "the structured answer was cut at max_tokens before its JSON closed (finish_reason='length'): raise max_tokens"
    )
    assert error.text == error.llm_output == '{"name'
    assert error.finish_reason == "length"
    assert error.stats is not None and error.stats["tokens_emitted"] == 5


def test_json_mode_with_wrong_keys_raises_with_the_raw_text(chat: ChatMTP) -> None:
    structured = chat.with_structured_output(Capital, method="json_mode")
    prompt = 'Reply with a JSON object with the key "city" naming the capital of France.'
    with pytest.raises(StructuredOutputParserError) as caught:
        structured.invoke(prompt, max_tokens=120)
    error = caught.value
    assert str(error).startswith("the structured answer does not match Capital: 1 validation error for Capital")
    assert 'use method="json_schema" (the default), whose grammar enforces the schema' in str(error)
    assert error.text == '{"city":{"capital":"Paris"}}' and error.finish_reason == "eog"
    raw = chat.with_structured_output(Capital, method="json_mode", include_raw=True).invoke(prompt, max_tokens=120)
    assert raw["parsed"] is None and isinstance(raw["parsing_error"], StructuredOutputError)
    assert STATS_KEY in raw["raw"].response_metadata


def test_llamaindex_structured_predict_cut_by_max_tokens_says_so(index_llm: IndexLLM) -> None:
    from llama_index.core.prompts import PromptTemplate

    with pytest.raises(StructuredOutputError) as caught:
        index_llm.structured_predict(City, PromptTemplate("{fact}"), llm_kwargs={"max_tokens": 5}, fact="Paris is in France.")
    assert "cut at max_tokens before its JSON closed (finish_reason='length')" in str(caught.value)
    assert caught.value.finish_reason == "length" and caught.value.stats is not None


def test_llamaindex_structured_llm_parses_through_the_same_path_with_stats(index_llm: IndexLLM) -> None:
    from llama_index.core.llms import ChatMessage

    structured = index_llm.as_structured_llm(City)
    response = structured.chat([ChatMessage(role="user", content="Paris is the capital of France.")])
    assert isinstance(response.raw, City)
    assert response.message.content == response.raw.model_dump_json()
    assert response.additional_kwargs[STATS_KEY]["tokens_emitted"] > 0
    assert response.additional_kwargs["finish_reason"] == "eog"
    completion = structured.complete("Paris is the capital of France.")
    assert completion.raw == response.raw and STATS_KEY in completion.additional_kwargs
    with pytest.raises(StructuredOutputError, match="cut at max_tokens"):
        structured.chat([ChatMessage(role="user", content="Paris is the capital of France.")], max_tokens=5)


def test_schema_numbers_stay_finite() -> None:
    grammar = json_schema_grammar({"type": "object", "properties": {"p": {"type": "number"}}, "required": ["p"]})
    (number,) = [line for line in grammar.splitlines() if line.startswith("number ::=")]
    assert number.endswith('([eE] [-+]? [0-9] [0-9]?)?')  # at most e99: no 1e400 (inf)
    with pytest.raises(StructuredOutputError, match=r"a number out of range \(1e400\)"):
        parse_structured('{"p": 1e400}', json_object, "a JSON object", finish_reason="eog", stats=None)


# --------------------------------------------------------------- tokenizer --


def test_langchain_counts_tokens_with_the_models_tokenizer(chat: ChatMTP) -> None:
    model = Model.load_default()
    assert chat.get_token_ids("Hello world") == model.tokenize("Hello world", add_special=False)
    assert chat.get_num_tokens("Hello world") == len(model.tokenize("Hello world", add_special=False))
    assert MTPLLM(n_threads=THREADS).get_num_tokens("Hello world") == chat.get_num_tokens("Hello world")
    messages = [SystemMessage("Be brief."), HumanMessage("What is the capital of France?")]
    counted = chat.get_num_tokens_from_messages(messages)
    reply = chat.invoke(messages, max_tokens=4)
    assert reply.usage_metadata is not None and counted == reply.usage_metadata["input_tokens"]
    with_tools = chat.get_num_tokens_from_messages(messages, tools=[get_weather])
    assert with_tools > counted
    history = [*messages, AIMessage("Paris."), HumanMessage("And of Spain?")]
    budget = chat.get_num_tokens_from_messages(history) - 1
    kept = trim_messages(history, token_counter=chat, max_tokens=budget, strategy="last", include_system=True)
    assert kept[0] == messages[0] and len(kept) < len(history)
    assert chat.get_num_tokens_from_messages(kept) <= budget


def test_llamaindex_tokenizer_is_the_models(index_llm: IndexLLM) -> None:
    from llama_index.core.callbacks import CallbackManager, TokenCountingHandler

    model = Model.load_default()
    assert index_llm.tokenizer("Hello world") == model.tokenize("Hello world", add_special=False)
    counter = TokenCountingHandler(tokenizer=index_llm.tokenizer)
    llm = index_llm.model_copy(update={"callback_manager": CallbackManager([counter])})
    llm.complete("The capital of France is", max_tokens=4)
    assert counter.prompt_llm_token_count == len(model.tokenize("The capital of France is", add_special=False))


# -------------------------------------------------------------- agent loop --
# (the agent recipe itself, whose answering call reuses the calling call's whole prompt: test_langchain.py)


def test_json_path_writes_earlier_calls_back_as_the_grammar_wrote_them(chat: ChatMTP) -> None:
    from mtp_llm._integration import chat_turn

    call = {"id": "1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    messages = [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    tools = [convert_to_openai_tool(get_weather)]
    prompt = chat_turn(chat.client, None, messages, tools=tools, tool_choice="none").prompt
    assert '{"name":"get_weather","arguments":{"city":"Paris"}}' in prompt


def test_earlier_answers_go_back_as_the_tokens_they_were_written_with(chat: ChatMTP) -> None:
    from mtp_llm._integration import chat_prompt_tokens

    model = chat.client.model
    written = [model.tokenize(piece, add_special=False)[0] for piece in ("{", '"', "name")]
    assert model.detokenize(written) == '{"name'
    assert written != model.tokenize('{"name', add_special=False)  # not how the tokenizer writes it
    prompt = 'Q<|im_end|>\n<|im_start|>assistant\n{"name<|im_end|>\n'
    tokens = chat_prompt_tokens(chat.client, prompt, [written])
    assert isinstance(tokens, list)
    before = model.tokenize("Q<|im_end|>\n<|im_start|>assistant\n")
    assert tokens[: len(before) + 3] == [*before, *written]
    assert model.detokenize(tokens, render_special=True) == model.detokenize(model.tokenize(prompt), render_special=True)
    assert chat_prompt_tokens(chat.client, prompt, [model.tokenize("absent", add_special=False)]) == prompt
