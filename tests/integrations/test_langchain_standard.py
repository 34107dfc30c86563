"""LangChain's standard chat model suites (langchain-tests) wired to ChatMTP on a tiny model, and the
tool-calling tests the tiny model cannot pass on the built-in model.

A standard test may not be overridden; the ones that cannot pass are xfailed with the reason.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import pytest
from langchain_tests.integration_tests import ChatModelIntegrationTests
from langchain_tests.unit_tests import ChatModelUnitTests

from mtp_llm.langchain import ChatMTP
from mtp_llm.gguf.tiny_models import make_tiny_models

from tests.helpers import MODELS_DIR, THREADS

_ARBITRARY = (
    "the tiny random-weight test model fills the grammar-valid tool call with arbitrary values: "
    "the test checks that the model understood the prompt ({})"
)


def _xfail(base: Callable[..., Any], reason: str) -> Callable[..., Any]:
    """Re-expose a standard test unchanged, marked xfail (keeping its parametrization)."""
    if inspect.iscoroutinefunction(base):

        @functools.wraps(base)
        async def test(self: Any, *args: Any, **kwargs: Any) -> Any:
            return await base(self, *args, **kwargs)

    else:

        @functools.wraps(base)
        def test(self: Any, *args: Any, **kwargs: Any) -> Any:
            return base(self, *args, **kwargs)

    test.pytestmark = [*getattr(base, "pytestmark", []), pytest.mark.xfail(reason=reason, strict=True)]  # type: ignore[attr-defined]
    return test


def _params() -> dict[str, Any]:
    path = make_tiny_models(MODELS_DIR)["random"]
    return {"model_path": str(path), "n_threads": THREADS, "n_ctx": 2048, "seed": 1}


class _ChatMTPUnderTest:
    """What both standard suites are told about ChatMTP."""

    @property
    def chat_model_class(self) -> type[ChatMTP]:
        return ChatMTP

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return _params()

    @property
    def has_tool_choice(self) -> bool:
        return True

    @property
    def standard_chat_model_params(self) -> dict[str, Any]:
        # The suites also pass a remote model's max_retries and api_key, which ChatMTP refuses (it runs in this
        # process: nothing to retry, no key); the other standard parameters stay.
        params: dict[str, Any] = super().standard_chat_model_params  # type: ignore[misc]
        return {k: v for k, v in params.items() if k not in ("max_retries", "api_key")}


class TestChatMTPUnit(_ChatMTPUnderTest, ChatModelUnitTests):
    pass


class TestChatMTPIntegration(_ChatMTPUnderTest, ChatModelIntegrationTests):
    @property
    def tool_choice_value(self) -> str | None:
        # The tiny test model cannot decide by itself when to call a tool.
        return "any"

    @property
    def supports_json_mode(self) -> bool:
        return False

    test_tool_calling = _xfail(
        ChatModelIntegrationTests.test_tool_calling, _ARBITRARY.format("expects the argument 3 from the question")
    )
    test_tool_calling_async = _xfail(
        ChatModelIntegrationTests.test_tool_calling_async, _ARBITRARY.format("expects the argument 3 from the question")
    )
    test_bind_runnables_as_tools = _xfail(
        ChatModelIntegrationTests.test_bind_runnables_as_tools,
        _ARBITRARY.format("expects a non-empty answer_style; the model writes an empty string"),
    )
    test_unicode_tool_call_integration = _xfail(
        ChatModelIntegrationTests.test_unicode_tool_call_integration,
        _ARBITRARY.format("expects the Chinese name from the question in the arguments"),
    )
    test_structured_output_optional_param = _xfail(
        ChatModelIntegrationTests.test_structured_output_optional_param,
        "the tiny random-weight test model fills a grammar-free string until max_tokens runs out: the cut "
        "answer raises StructuredOutputParserError (finish_reason='length') instead of parsing partial JSON",
    )


class _BuiltInModelSuite(_ChatMTPUnderTest, ChatModelIntegrationTests):
    """The integration suite's settings for ChatMTP on the built-in model (SmolLM2-135M-Instruct with
    its MTP head). Not collected: the tool-calling tests the random model fails run on it below."""

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"n_threads": THREADS, "n_ctx": 2048, "seed": 1}  # model_path None: the built-in model

    @property
    def tool_choice_value(self) -> str | None:
        return "any"


@pytest.fixture(scope="module")
def built_in_chat() -> ChatMTP:
    suite = _BuiltInModelSuite()
    return ChatMTP(**{**suite.standard_chat_model_params, **suite.chat_model_params})


@pytest.mark.parametrize("name", ["test_bind_runnables_as_tools", "test_tool_calling_with_no_arguments"])
def test_standard_tool_calling_on_the_built_in_model(built_in_chat: ChatMTP, name: str) -> None:
    """Standard tests, unchanged, that need a model which reads the question: the built-in one does.
    (`test_tool_calling` still fails there: asked for magic_function(3), SmolLM2-135M writes
    {'input': 200}. `test_unicode_tool_call_integration` passed until patch 0012 changed how ggml
    rounds attention past 256 positions: the model's greedy answer now fills the free-text
    `description` argument until the 256-token limit, so no call is parsed; a 135M model's limit.)"""
    getattr(_BuiltInModelSuite(), name)(built_in_chat)
