"""The integrations' fields are tied to the one definition of each option set: every
GenerationOptions field reaches the engine from LangChain's MTPLLM and ChatMTP and from
LlamaIndex's MTPLLM, and every SessionOptions field is a field of each of them with the
same default, so a new option cannot be forgotten in one integration."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from mtp_llm import GenerationOptions, SessionOptions
from mtp_llm._integration import CALL_ONLY_OPTIONS, OPTION_ATTRIBUTES, EngineSpec, call_options
from mtp_llm.langchain import MTPLLM as LangChainLLM
from mtp_llm.langchain import ChatMTP
from mtp_llm.llamaindex import MTPLLM as LlamaIndexLLM

INTEGRATIONS = [LangChainLLM, ChatMTP, LlamaIndexLLM]

_SET: dict[str, Any] = {
    "max_tokens": 7,
    "emit_stats_every": 2,
    "timeout": 1.5,
    "stop": ("x",),
    "temp": 0.25,
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
        "flash_attn": False,
        "type_k": "q8_0",
        "type_v": "f16",
        "offload_kqv": False,
        "rollback": "checkpoint",
        "cache_prompt": False,
        "cache_size_mb": 8.0,
        "fuse_catch_up": False,
        "n_parallel": 4,
    }
    assert set(changed) == {f.name for f in dataclasses.fields(SessionOptions)}
    loading = {"model_path": "model.gguf", "draft_model_path": "mtp-model.gguf", "n_gpu_layers": 1, "use_mmap": False}
    expected = EngineSpec(**loading, session_options=SessionOptions(**changed))
    specs = [EngineSpec.of(cls(**loading, **changed)) for cls in INTEGRATIONS]
    assert specs == [expected] * len(INTEGRATIONS)  # equal settings: one shared session


