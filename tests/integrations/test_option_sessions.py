"""The integrations create their sessions with the instance's options (loads the tiny models)."""

from __future__ import annotations

import dataclasses
from typing import Any

from mtp_llm import SessionOptions
from mtp_llm.langchain import MTPLLM as LangChainLLM
from mtp_llm.langchain import ChatMTP
from mtp_llm.llamaindex import MTPLLM as LlamaIndexLLM


def test_sessions_are_created_with_the_instance_options(tiny_paths: dict[str, Any], accept100_model: Any) -> None:
    options = SessionOptions(n_draft=2, n_ctx=256, n_threads=1, flash_attn=False, offload_kqv=False, rollback="rs")
    fields = dataclasses.asdict(options)
    via_path = LlamaIndexLLM(model_path=str(tiny_paths["accept100"]), **fields).session
    via_model = ChatMTP(model=accept100_model, **fields).client  # a loaded model: a session of its own
    assert via_path.session_options == via_model.session_options == options
    assert via_model.model is accept100_model and via_model is not via_path
    assert LangChainLLM(model_path=str(tiny_paths["accept100"]), **fields).client is via_path


def test_both_integrations_name_the_model_alike(accept100_model: Any) -> None:
    """``model_name=``, else the given model's file, else ``model_path``'s: the same in both."""
    for cls in (LangChainLLM, ChatMTP, LlamaIndexLLM):
        assert cls(model=accept100_model)._display_name() == "accept100", cls
        assert cls(model=accept100_model, model_name="mine")._display_name() == "mine", cls
        assert cls(model_path="dir/other.gguf")._display_name() == "other", cls
    llm = LlamaIndexLLM(model=accept100_model, n_ctx=256, n_threads=1)
    assert llm.metadata.model_name == "accept100" and llm.metadata.num_output == 256  # max_tokens None: 256
    assert llm.session.model is accept100_model
