"""A LangChain agent (``create_agent``) that calls a tool, then answers; bounded.

    python examples/langchain_agent.py

A 135M-parameter model calls ``multiply`` correctly but, asked again with the result in front of it,
tends to call the tool again instead of answering. Two middlewares bound the loop the way a user
would: after a tool result the model must answer in words (``tool_choice="none"``), and
``ModelCallLimitMiddleware`` stops any run after three model calls whatever happens.
"""

from __future__ import annotations

import os
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import ModelCallLimitMiddleware, wrap_model_call
from langchain_core.messages import ToolMessage
from langchain_core.tools import tool

from mtp_llm.langchain import ChatMTP, MTPStatsHandler


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


@wrap_model_call
def answer_after_a_tool_result(request: Any, handler: Any) -> Any:
    """Once a tool has answered, the model writes the final answer instead of calling tools again."""
    if any(isinstance(m, ToolMessage) for m in request.messages):
        request = request.override(tool_choice="none")
    return handler(request)


def main(question: str = "What is 12 times 7? Use the multiply tool.") -> tuple[dict, list[dict]]:
    """Runs the agent; returns its final state and each model call's stats."""
    chat = ChatMTP(model_path=os.environ.get("MTP_LLM_MODEL"), temperature=0, max_tokens=96)
    agent = create_agent(
        chat,
        tools=[multiply],
        middleware=[answer_after_a_tool_result, ModelCallLimitMiddleware(run_limit=3, exit_behavior="end")],
    )
    stats = MTPStatsHandler()
    state = agent.invoke({"messages": [("human", question)]}, config={"callbacks": [stats]})
    for message in state["messages"]:
        calls = getattr(message, "tool_calls", None)
        print(f"{type(message).__name__}: {calls if calls else message.content}")
    for i, call in enumerate(stats.calls, 1):
        print(f"model call {i}: {call['tokens_emitted']} tokens, acceptance {call['acceptance_rate']:.0%}, "
              f"prompt tokens reused from the cache {call['prompt_tokens_cached']} of {call['prompt_tokens']}")
    return state, stats.calls


if __name__ == "__main__":
    main()
