"""Prompt tokens processed over a 10-turn ChatMTP conversation on the built-in model against the
tokens that are new across turns (prompt cache). Usage: python benchmarks/chat_turns.py"""
from langchain_core.messages import AIMessage, HumanMessage
from mtp_llm.langchain import ChatMTP
chat = ChatMTP(n_threads=2, n_ctx=4096, temperature=0, max_tokens=24)
messages = []; processed = new = prev = 0
for turn in range(10):
    messages.append(HumanMessage(f"Turn {turn}: tell me about the fox and the dog."))
    reply = chat.invoke(messages)
    u = reply.usage_metadata; cached = u["input_token_details"]["cache_read"]
    processed += u["input_tokens"] - cached; new += u["input_tokens"] - prev; prev = u["input_tokens"]
    messages.append(AIMessage(reply.content))
print("processed", processed, "new", new, "ratio", round(processed / new, 3))
