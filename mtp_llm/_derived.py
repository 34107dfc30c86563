"""The integrations' field models, derived from the option declarations (:mod:`mtp_llm._fields`).

Type checkers read ``_derived.pyi`` instead, generated from the same declarations
(``python -m mtp_llm._fields > mtp_llm/_derived.pyi``; a unit test checks it is current).
"""

from __future__ import annotations

from ._fields import DERIVED, ChatBase, EmbeddingBase, IntegrationBase, derived_model

__all__ = ["ChatFields", "EmbeddingFields", "LLMFields"]

_BASES = {"IntegrationBase": IntegrationBase, "ChatBase": ChatBase, "EmbeddingBase": EmbeddingBase}

LLMFields, ChatFields, EmbeddingFields = (
    derived_model(name, _BASES[base], fields()) for name, (base, fields) in DERIVED.items()
)
