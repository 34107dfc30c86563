"""LlamaIndex RAG over a few documents: embeddings and answers from the same local model.

    python examples/llamaindex_rag.py

``MTPEmbedding`` embeds with the model's own hidden states (no second model); the answer streams
through ``MTPLLM`` with MTP, and the speculative stats arrive as an ``MTPStatsEvent`` on LlamaIndex's
instrumentation dispatcher.
"""

from __future__ import annotations

import os

from llama_index.core import Document, Settings, VectorStoreIndex
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler

from mtp_llm.llamaindex import MTPEmbedding, MTPLLM, MTPStatsEvent

DOCUMENTS = [
    "The Eiffel Tower is in Paris. It was finished in 1889 and is 330 metres tall.",
    "Honeybees live in colonies of up to 60,000 bees. The queen lays all the eggs.",
    "The Great Wall of China is more than 21,000 kilometres long, built over many centuries.",
]


class StatsCollector(BaseEventHandler):
    """Keeps the final speculative stats of every MTPLLM call (LlamaIndex instrumentation)."""

    stats: list[dict] = []

    def handle(self, event, **kwargs) -> None:  # type: ignore[no-untyped-def]
        if isinstance(event, MTPStatsEvent) and event.final:
            self.stats.append(event.stats)


def main(question: str = "How tall is the Eiffel Tower?") -> tuple[str, list]:
    model = os.environ.get("MTP_LLM_MODEL")
    Settings.llm = MTPLLM(model_path=model, temperature=0, max_tokens=64)
    Settings.embed_model = MTPEmbedding(model_path=model)
    collector = StatsCollector()
    get_dispatcher().add_event_handler(collector)
    index = VectorStoreIndex.from_documents([Document(text=t) for t in DOCUMENTS])
    engine = index.as_query_engine(similarity_top_k=1, streaming=True)
    response = engine.query(question)
    answer = ""
    for piece in response.response_gen:
        answer += piece
        print(piece, end="", flush=True)
    source = response.source_nodes[0].node.get_content()
    print(f"\n\nretrieved: {source!r}")
    if collector.stats:
        s = collector.stats[-1]
        print(f"acceptance {s['acceptance_rate']:.0%}, {s['mean_accepted_length']:.2f} tokens per verify pass")
    return answer, response.source_nodes


if __name__ == "__main__":
    main()
