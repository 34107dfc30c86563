"""The integrations' pydantic fields, derived from the one declaration of each option.

LangChain's ``MTPLLM`` / ``ChatMTP`` and LlamaIndex's ``MTPLLM`` / ``MTPEmbedding`` are
pydantic models. Their option fields are not written out in either module: they are
built here from the dataclasses that declare each option once, with its type, default,
doc and bounds (:func:`mtp_llm.options.option_specs`, as vLLM derives its CLI from its
config fields):

* where the model comes from: :class:`~mtp_llm._integration.EngineSpec`'s fields;
* how the session is created: every :class:`~mtp_llm.SessionOptions` field, same type and
  default;
* the generation defaults of each call: every :class:`~mtp_llm.GenerationOptions` field that
  is not also a session option, under its integration name (``temp`` -> ``temperature``),
  optional with default None, meaning the :class:`~mtp_llm.GenerationOptions` default. Both
  integrations therefore have the same defaults (``max_tokens`` None = 256 in both).

:class:`IntegrationBase` also holds what both integrations do with these fields: the lazily
created session (locked), the display name, the options of one call.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, create_model

from ._integration import ChatSettings, EmbeddingSpec, EngineSpec, call_options, display_name, get_session, instance_options
from .model import Model
from .options import GenerationOptions, OptionSpec, SessionOptions, option_specs
from .session import MTP

__all__ = [
    "ChatBase",
    "ChatFields",
    "EmbeddingBase",
    "EmbeddingFields",
    "IntegrationBase",
    "LLMFields",
    "chat_fields",
    "embedding_fields",
    "integration_fields",
]

_session_lock = threading.Lock()


def _pydantic_field(spec: OptionSpec, *, name: str | None = None, optional: bool = False) -> tuple[Any, Any]:
    """``(type, Field(...))`` of one option: its choices as a ``Literal``, its bounds as constraints."""
    annotation: Any = spec.type
    if spec.choices is not None:
        annotation = Literal.__getitem__(spec.choices)  # type: ignore[attr-defined]
        if spec.optional:
            annotation = Optional[annotation]
    default = spec.default
    doc = spec.doc
    if optional:
        if not spec.optional:
            annotation = Optional[annotation]
        doc = f"{doc} None = the default, {default!r}." if default is not None else doc
        default = None
    return annotation, Field(default=default, description=doc, ge=spec.ge, gt=spec.gt, le=spec.le)


def integration_fields() -> dict[str, tuple[Any, Any]]:
    """Every option field of an LLM integration, by field name (see the module doc)."""
    fields: dict[str, tuple[Any, Any]] = {}
    for spec in option_specs(EngineSpec):
        if spec.name != "session_options":
            fields[spec.name] = _pydantic_field(spec)
    for spec in option_specs(SessionOptions):
        fields[spec.name] = _pydantic_field(spec)
    for option, attribute in instance_options().items():
        spec = next(s for s in option_specs(GenerationOptions) if s.name == option)
        fields[attribute] = _pydantic_field(spec, optional=True)
    return fields


def embedding_fields() -> dict[str, tuple[Any, Any]]:
    """The fields of an embedding integration (:class:`~mtp_llm._integration.EmbeddingSpec`'s)."""
    return {spec.name: _pydantic_field(spec) for spec in option_specs(EmbeddingSpec)}


def chat_fields() -> dict[str, tuple[Any, Any]]:
    """The chat fields of a chat model (:class:`~mtp_llm._integration.ChatSettings`'s)."""
    return {spec.name: _pydantic_field(spec) for spec in option_specs(ChatSettings)}


class ChatBase(BaseModel):
    """Base of the derived chat fields (:func:`chat_fields`)."""

    model_config = ConfigDict(protected_namespaces=())

    if TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any: ...


class IntegrationBase(BaseModel):
    """What LangChain's and LlamaIndex's LLM classes share: the loaded-model fields and the
    engine around the derived option fields (:func:`integration_fields`)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, protected_namespaces=())

    model: Model | None = Field(default=None, exclude=True)
    """An already loaded :class:`mtp_llm.Model` (instead of ``model_path``); this
    instance creates its own session on it at first use."""
    model_name: str | None = None
    """Name reported in metadata and traces (default: the model file's stem)."""

    _own_session: MTP | None = PrivateAttr(default=None)

    if TYPE_CHECKING:  # the derived fields (integration_fields) are not visible to type checkers

        def __getattr__(self, name: str) -> Any: ...

    def _given_session(self) -> MTP | None:
        """A session handed in by the user (LangChain's ``session`` field), else None."""
        return None

    def _engine(self) -> MTP:
        """The native session: the given one, else created on first use (once, under a lock) from
        this instance's fields and shared with equal instances."""
        given = self._given_session()
        if given is not None:
            return given
        if self._own_session is None:
            with _session_lock:
                if self._own_session is None:
                    self._own_session = get_session(EngineSpec.of(self), self.model)
        return self._own_session

    def _display_name(self) -> str:
        """``model_name``, else the stem of the model's file (a given session's, a given model's,
        ``model_path`` or the repository's)."""
        if self.model_name:
            return self.model_name
        given = self._given_session()
        if given is not None:
            return given.model.path.stem
        if self.model is not None:
            return self.model.path.stem
        return display_name(self.model_path, self.repo_id, self.filename)

    def _call_options(self, kwargs: Mapping[str, Any], stop: str | Sequence[str] | None = None) -> GenerationOptions:
        """This instance's generation defaults, overridden by a call's options (a call's ``stop`` wins)."""
        return call_options(self, kwargs, stop)


class EmbeddingBase(BaseModel):
    """What both embedding integrations do with their fields (:func:`embedding_fields`)."""

    model_config = ConfigDict(protected_namespaces=())

    if TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any: ...

    def _embed(self, texts: Sequence[str]) -> list[list[float]]:
        return EmbeddingSpec.of(self).embed(texts)


def _derived(name: str, base: type[BaseModel], fields: dict[str, tuple[Any, Any]]) -> Any:
    return create_model(name, __base__=base, **fields)


# The bases the integrations' classes derive from. Type checkers see the hand-written bases only
# (their ``__getattr__`` types the derived fields as Any).
if TYPE_CHECKING:
    LLMFields = IntegrationBase
    ChatFields = ChatBase
    EmbeddingFields = EmbeddingBase
else:
    LLMFields = _derived("LLMFields", IntegrationBase, integration_fields())
    """Every option field of an LLM integration (:func:`integration_fields`) on :class:`IntegrationBase`."""
    ChatFields = _derived("ChatFields", ChatBase, chat_fields())
    """The chat fields (:func:`chat_fields`)."""
    EmbeddingFields = _derived("EmbeddingFields", EmbeddingBase, embedding_fields())
    """The embedding fields (:func:`embedding_fields`) on :class:`EmbeddingBase`."""
