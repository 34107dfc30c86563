"""Each option is declared once (SessionOptions, GenerationOptions, EngineSpec, ChatSettings,
EmbeddingSpec: name, type, default, doc, bounds) and everything else is derived from that
declaration: MTP's keyword arguments, LangChain's and LlamaIndex's fields, the CLI's flags.
These tests compare each derived place with the declaration, so a new option cannot be
forgotten or restated differently anywhere; and every GenerationOptions field reaches the
engine from each integration."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
from typing import Any

import pytest
from pydantic import BaseModel

from mtp_llm import MTP, GenerationOptions, InvalidOptionError, SessionOptions, _core
from mtp_llm._integration import (
    CALL_ONLY_OPTIONS,
    OPTION_ATTRIBUTES,
    ChatSettings,
    EmbeddingSpec,
    EngineSpec,
    call_options,
)
from mtp_llm.cli import GENERATE_FLAGS, build_parser
from mtp_llm.langchain import MTPLLM as LangChainLLM
from mtp_llm.langchain import ChatMTP, MTPEmbeddings
from mtp_llm.llamaindex import MTPLLM as LlamaIndexLLM
from mtp_llm.llamaindex import MTPEmbedding
from mtp_llm.options import MAX_DRAFT, ROLLBACK_MODES, OptionSpec, option_specs

INTEGRATIONS = [LangChainLLM, ChatMTP, LlamaIndexLLM]
CHAT_MODELS = [ChatMTP, LlamaIndexLLM]
EMBEDDINGS = [MTPEmbeddings, MTPEmbedding]
SCHEMAS = [SessionOptions, GenerationOptions, EngineSpec, ChatSettings, EmbeddingSpec]

_SET: dict[str, Any] = {
    "max_tokens": 7,
    "emit_stats_every": 2,
    "timeout": 1.5,
    "stop": ("x",),
    "temp": 0.25,
    "draft_temp": 0.5,
    "top_k": 3,
    "top_p": 0.5,
    "min_p": 0.125,
    "seed": 42,
    "repeat_penalty": 1.5,
    "frequency_penalty": 0.25,
    "presence_penalty": 0.5,
    "penalty_last_n": 9,
    "grammar": 'root ::= "a"',
    "reasoning_budget": 8,
    "logprobs": True,
    "top_logprobs": 4,
}
"""A value other than the default for every option with an instance default."""


def _field_default(cls: Any, name: str) -> Any:
    assert name in cls.model_fields, f"{cls.__module__}.{cls.__name__} has no field {name!r}"
    return cls.model_fields[name].get_default(call_default_factory=True)


def test_every_generation_option_has_an_instance_default_or_is_per_call() -> None:
    fields = {f.name for f in dataclasses.fields(GenerationOptions)}
    assert set(OPTION_ATTRIBUTES) | CALL_ONLY_OPTIONS == fields
    assert not set(OPTION_ATTRIBUTES) & CALL_ONLY_OPTIONS
    assert set(_SET) == set(OPTION_ATTRIBUTES) and CALL_ONLY_OPTIONS == {"n_draft", "cache_prompt"}  # each tested below


@pytest.mark.parametrize("cls", INTEGRATIONS, ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_generation_options_reach_the_engine(cls: Any) -> None:
    for attribute in OPTION_ATTRIBUTES.values():
        _field_default(cls, attribute)
    assert call_options(cls(), {}) == GenerationOptions()  # unset fields: the engine's defaults
    instance = cls(**{attribute: _SET[option] for option, attribute in OPTION_ATTRIBUTES.items()})
    assert call_options(instance, {}) == GenerationOptions(**_SET)
    assert call_options(instance, {"n_draft": 1}).n_draft == 1  # CALL_ONLY_OPTIONS
    assert call_options(instance, {"cache_prompt": False}).cache_prompt is False


@pytest.mark.parametrize("cls", INTEGRATIONS, ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_session_options_are_fields_with_the_same_defaults(cls: Any) -> None:
    for field in dataclasses.fields(SessionOptions):
        assert _field_default(cls, field.name) == field.default, field.name


def test_engine_spec_is_read_by_field_name() -> None:
    changed = {
        "n_draft": 2,
        "n_draft_max": 3,
        "p_min": 0.5,
        "n_ctx": 1024,
        "n_batch": 64,
        "n_threads": 1,
        "n_threads_batch": 2,
        "adaptive_threads": False,
        "flash_attn": False,
        "type_k": "q8_0",
        "type_v": "f16",
        "offload_kqv": False,
        "rollback": "checkpoint",
        "cache_prompt": False,
        "cache_size_mb": 8.0,
        "fuse_catch_up": False,
        "grammar_drafts": False,
        "n_parallel": 4,
    }
    assert set(changed) == {f.name for f in dataclasses.fields(SessionOptions)}
    loading = {"model_path": "model.gguf", "draft_model_path": "mtp-model.gguf", "n_gpu_layers": 1, "use_mmap": False}
    expected = EngineSpec(**loading, session_options=SessionOptions(**changed))
    specs = [EngineSpec.of(cls(**loading, **changed)) for cls in INTEGRATIONS]
    assert specs == [expected] * len(INTEGRATIONS)  # equal settings: one shared session




# ------------------------------------------------------- derived from the schema --


def _bounds(info: Any) -> dict[str, Any]:
    """The ge/gt/le constraints of a pydantic field."""
    found: dict[str, Any] = {}
    for item in info.metadata:
        for name in ("ge", "gt", "le"):
            if getattr(item, name, None) is not None:
                found[name] = getattr(item, name)
    return found


def _spec_bounds(spec: OptionSpec) -> dict[str, Any]:
    return {name: getattr(spec, name) for name in ("ge", "gt", "le") if getattr(spec, name) is not None}


def _assert_field(cls: type[BaseModel], name: str, spec: OptionSpec, *, default: Any, doc_prefix: bool = False) -> None:
    where = f"{cls.__module__}.{cls.__name__}.{name}"
    assert name in cls.model_fields, where
    info = cls.model_fields[name]
    assert info.get_default(call_default_factory=True) == default, where
    assert info.description is not None, where
    assert info.description.startswith(spec.doc) if doc_prefix else info.description == spec.doc, where
    assert _bounds(info) == _spec_bounds(spec), where


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda c: c.__name__)
def test_every_option_is_documented(schema: type) -> None:
    for spec in option_specs(schema):
        assert spec.doc.strip(), f"{schema.__name__}.{spec.name} has no docstring"


def test_mtp_keyword_arguments_are_the_session_options() -> None:
    parameters = dict(inspect.signature(MTP).parameters)
    assert list(parameters)[:3] == ["model", "draft_model", "defaults"]
    options = {name: p for name, p in parameters.items() if name not in ("model", "draft_model", "defaults")}
    specs = option_specs(SessionOptions)
    assert list(options) == [spec.name for spec in specs]
    for spec in specs:
        assert options[spec.name].kind is inspect.Parameter.KEYWORD_ONLY
        assert options[spec.name].default == spec.default, spec.name
    with pytest.raises(InvalidOptionError, match=r"^MTP\(\) got unknown option 'n_ctxx': did you mean n_ctx\. Valid options: "):
        SessionOptions.from_kwargs(n_ctxx=1)
    with pytest.raises(InvalidOptionError, match=r"^MTP\(\) got unknown option 'num_ctx' \(Ollama's name\): use n_ctx\."):
        SessionOptions.from_kwargs(num_ctx=1)


@pytest.mark.parametrize("cls", INTEGRATIONS, ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_integration_fields_are_derived_from_the_schema(cls: type[BaseModel]) -> None:
    for spec in option_specs(SessionOptions):
        _assert_field(cls, spec.name, spec, default=spec.default)
    for spec in option_specs(EngineSpec):
        if spec.name != "session_options":
            _assert_field(cls, spec.name, spec, default=spec.default)
    generation = {spec.name: spec for spec in option_specs(GenerationOptions)}
    for option, attribute in OPTION_ATTRIBUTES.items():
        # One default per option in both integrations: None, meaning GenerationOptions' default.
        _assert_field(cls, attribute, generation[option], default=None, doc_prefix=True)
    assert OPTION_ATTRIBUTES["temp"] == "temperature" and OPTION_ATTRIBUTES["max_tokens"] == "max_tokens"


@pytest.mark.parametrize("cls", CHAT_MODELS, ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_chat_fields_are_derived_from_chat_settings(cls: type[BaseModel]) -> None:
    for spec in option_specs(ChatSettings):
        _assert_field(cls, spec.name, spec, default=spec.default)


@pytest.mark.parametrize("cls", EMBEDDINGS, ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_embedding_fields_are_derived_from_embedding_spec(cls: type[BaseModel]) -> None:
    for spec in option_specs(EmbeddingSpec):
        _assert_field(cls, spec.name, spec, default=spec.default)


def test_both_integrations_have_the_same_option_fields() -> None:
    """No option field is declared in one integration only (beyond LangChain's ``session`` and
    ``streaming`` and the frameworks' own fields)."""
    ours = set(OPTION_ATTRIBUTES.values()) | {f.name for f in dataclasses.fields(SessionOptions)}
    ours |= {f.name for f in dataclasses.fields(EngineSpec)} - {"session_options"}
    ours |= {f.name for f in dataclasses.fields(ChatSettings)} | {"model", "model_name"}
    langchain = set(ChatMTP.model_fields) - {"session", "streaming"}
    llamaindex = set(LlamaIndexLLM.model_fields)
    assert ours <= langchain and ours <= llamaindex
    from langchain_core.language_models import BaseChatModel
    from llama_index.core.llms.function_calling import FunctionCallingLLM

    assert langchain - set(BaseChatModel.model_fields) == ours
    assert llamaindex - set(FunctionCallingLLM.model_fields) == ours


def test_validation_bounds_hold_in_both_integrations() -> None:
    for cls in INTEGRATIONS:
        for bad in ({"n_draft_max": MAX_DRAFT + 1}, {"max_tokens": 0}, {"top_p": 1.5}, {"rollback": "sometimes"}):
            with pytest.raises(ValueError):
                cls(**bad)
        cls(n_draft_max=MAX_DRAFT, max_tokens=1, top_p=1.0, rollback=ROLLBACK_MODES[-1])


def test_constants_come_from_the_engine() -> None:
    assert MAX_DRAFT == _core.MAX_DRAFT_POSITIONS == 16
    assert ROLLBACK_MODES == _core.ROLLBACK_MODES == ("auto", "rs", "checkpoint")
    assert GenerationOptions.SAMPLING == {n for n in dir(_core.SamplingOptions) if not n.startswith("_")} - {"chat"}
    native = {n for n in dir(_core.ModelOptions) if not n.startswith("_")}
    assert native == {"load_mtp", "n_gpu_layers", "use_mmap", "use_mlock", "rpc_servers", "tensor_split",
                      "mtp_local", "rpc_timeout", "mtp_device"}


def _actions(parser: argparse.ArgumentParser, command: str) -> dict[str, argparse.Action]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest: a for a in sub.choices[command]._actions}


def test_cli_flags_are_derived_from_the_schema() -> None:
    actions = _actions(build_parser(), "generate")
    for spec in option_specs(SessionOptions):
        action = actions[spec.name]
        assert spec.flag in action.option_strings and action.default == spec.default, spec.name
        if spec.choices is not None:
            assert tuple(action.choices or ()) == spec.choices
    assert "--threads" in actions["n_threads"].option_strings  # the older spelling
    generation = {spec.name: spec for spec in option_specs(GenerationOptions)}
    for name in GENERATE_FLAGS:
        action = actions[name]
        expected = None if name == "stop" else generation[name].default  # the API's defaults
        assert generation[name].flag in action.option_strings and action.default == expected, name


def test_the_type_stubs_of_the_derived_fields_are_current() -> None:
    """``mtp_llm/_derived.pyi`` and ``mtp_llm/_kwargs.pyi`` are what type checkers see of the derived
    fields and of MTP's keyword arguments: regenerate them with ``python -m mtp_llm._fields >
    mtp_llm/_derived.pyi`` and ``python -m mtp_llm._kwargs > mtp_llm/_kwargs.pyi`` after changing an option."""
    from pathlib import Path

    from mtp_llm._fields import stub_source

    from mtp_llm._kwargs import stub_source as kwargs_stub_source

    package = Path(__file__).resolve().parents[2] / "mtp_llm"
    assert (package / "_derived.pyi").read_text() == stub_source()
    # MTP(**options): SessionKwargs, regenerated with ``python -m mtp_llm._kwargs > mtp_llm/_kwargs.pyi``
    assert (package / "_kwargs.pyi").read_text() == kwargs_stub_source()
