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

import functools
import re
import threading
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, create_model

from ._option_names import unknown_option_error
from .errors import InvalidOptionError
from ._integration import ChatSettings, EmbeddingSpec, EngineSpec, call_options, display_name, get_session, instance_options
from .model import Model
from .options import GenerationOptions, OptionSpec, SessionOptions, option_specs
from .session import MTP

__all__ = [
    "DERIVED",
    "CheckedInit",
    "ChatBase",
    "EmbeddingBase",
    "IntegrationBase",
    "chat_fields",
    "derived_model",
    "embedding_fields",
    "integration_fields",
    "stub_source",
]

_session_lock = threading.Lock()


def _as_list(annotation: Any) -> Any:
    """``tuple[X, ...]`` (how the dataclasses hold sequences) as ``list[X]`` (what the frameworks' fields take)."""
    if typing.get_origin(annotation) is tuple:
        return list[typing.get_args(annotation)[0]]  # type: ignore[misc]
    if typing.get_origin(annotation) in (Union, types.UnionType):
        return Union[tuple(_as_list(a) for a in typing.get_args(annotation))]
    return annotation


def _pydantic_field(spec: OptionSpec, *, optional: bool = False) -> tuple[Any, Any]:
    """``(type, Field(...))`` of one option: its choices as a ``Literal``, its bounds as constraints."""
    annotation: Any = _as_list(spec.type)
    if spec.choices is not None:
        annotation = Literal.__getitem__(spec.choices)
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


@functools.cache
def _accepted_names(cls: type[BaseModel]) -> frozenset[str]:
    names = set(cls.model_fields)
    for name, field in cls.model_fields.items():
        if isinstance(field.alias, str):
            names.add(field.alias)
        if isinstance(field.validation_alias, str):
            names.add(field.validation_alias)
    return frozenset(names)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def invalid_fields_error(cls: type[BaseModel], exc: ValidationError) -> InvalidOptionError:
    """pydantic's complaint about a constructor's fields as an :class:`InvalidOptionError`, with its detail."""
    by_field: dict[str, tuple[Any, list[str]]] = {}
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else "input"  # a union's alternatives share the field
        by_field.setdefault(field, (error.get("input"), []))[1].append(error["msg"])
    problems = "; ".join(f"{field}={_shown(given)}: {', or '.join(msgs)}" for field, (given, msgs) in by_field.items())
    return InvalidOptionError(f"{cls.__name__}() got an invalid option value: {problems}")


class CheckedInit(BaseModel):
    """Constructors that refuse what the frameworks' base classes would silently drop: an unknown
    option raises :class:`InvalidOptionError` naming the real one (``num_predict`` -> ``max_tokens``),
    and a value pydantic rejects raises it with pydantic's detail."""

    def __init__(self, /, **data: Any) -> None:
        cls = type(self)
        unknown = set(data) - _accepted_names(cls)
        if unknown:
            raise unknown_option_error(f"{cls.__name__}()", unknown, cls.model_fields)
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise invalid_fields_error(cls, exc) from None


class ChatBase(BaseModel):
    """Base of the derived chat fields (:func:`chat_fields`)."""

    model_config = ConfigDict(protected_namespaces=())


class IntegrationBase(CheckedInit):
    """What LangChain's and LlamaIndex's LLM classes share: the loaded-model fields and the
    engine around the derived option fields (:func:`integration_fields`)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, protected_namespaces=())

    model: Model | None = Field(default=None, exclude=True)
    """An already loaded :class:`mtp_llm.Model` (instead of ``model_path``); this
    instance creates its own session on it at first use."""
    model_name: str | None = None
    """Name reported in metadata and traces (default: the model file's stem)."""

    _own_session: MTP | None = PrivateAttr(default=None)

    def __init__(self, /, **data: Any) -> None:
        super().__init__(**data)
        # What the engine would refuse at the first call is refused now: the session's options
        # (``n_draft=99``) and the generation defaults.
        try:
            EngineSpec.of(self)
            self._call_options({})
        except InvalidOptionError as exc:
            raise InvalidOptionError(f"{type(self).__name__}(): {exc}") from None

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
        return display_name(getattr(self, "model_path"), getattr(self, "repo_id"), getattr(self, "filename"))

    def _call_options(self, kwargs: Mapping[str, Any], stop: str | Sequence[str] | None = None) -> GenerationOptions:
        """This instance's generation defaults, overridden by a call's options (a call's ``stop`` wins)."""
        return call_options(self, kwargs, stop)


class EmbeddingBase(CheckedInit):
    """What both embedding integrations do with their fields (:func:`embedding_fields`)."""

    model_config = ConfigDict(protected_namespaces=())

    _model: Model | None = PrivateAttr(default=None)

    def _loaded_model(self) -> Model:
        """The model, loaded on first use (shared with every instance on the same file)."""
        if self._model is None:
            self._model = EmbeddingSpec.of(self).model()
        return self._model

    def _embed(self, texts: Sequence[str]) -> list[list[float]]:
        return self._loaded_model().embed(list(texts), n_threads=getattr(self, "n_threads"))


def derived_model(name: str, base: type[BaseModel], fields: dict[str, tuple[Any, Any]]) -> type[BaseModel]:
    """A pydantic model ``name`` with ``fields`` on top of ``base``."""
    model: type[BaseModel] = create_model(name, __base__=base, **fields)  # type: ignore[call-overload]
    return model


# ----------------------------------------------------------- the stub --

DERIVED = {
    "LLMFields": ("IntegrationBase", integration_fields),
    "ChatFields": ("ChatBase", chat_fields),
    "EmbeddingFields": ("EmbeddingBase", embedding_fields),
}
"""The derived models of :mod:`mtp_llm._derived`: name -> (base, fields)."""


def _stub_annotation(spec: OptionSpec, *, optional: bool = False) -> str:
    annotation = re.sub(r"tuple\[(\w+), \.\.\.\]", r"list[\1]", spec.annotation)
    if spec.choices is not None:
        annotation = f"Literal[{', '.join(repr(c) for c in spec.choices)}]" + (" | None" if spec.optional else "")
    if optional and not spec.optional:
        annotation += " | None"
    return annotation


def stub_source() -> str:
    """The text of ``mtp_llm/_derived.pyi``: the derived models as classes with their fields, so that
    type checkers see every field (pydantic's models are checked as dataclasses). Written by
    ``python -m mtp_llm._fields``; a unit test checks it matches the declarations."""
    generation = {spec.name: spec for spec in option_specs(GenerationOptions)}
    lines = [
        '"""Generated by ``python -m mtp_llm._fields`` from the option declarations: do not edit."""',
        "",
        "from typing import Literal",
        "",
        "from ._fields import ChatBase, EmbeddingBase, IntegrationBase",
        "from .options import ChatGrammar, DraftLength",
        "",
        '__all__ = ["ChatFields", "EmbeddingFields", "LLMFields"]',
    ]
    sources: dict[str, list[tuple[str, str]]] = {
        "LLMFields": [(s.name, _stub_annotation(s)) for s in option_specs(EngineSpec) if s.name != "session_options"]
        + [(s.name, _stub_annotation(s)) for s in option_specs(SessionOptions)]
        + [(attribute, _stub_annotation(generation[option], optional=True)) for option, attribute in instance_options().items()],
        "ChatFields": [(s.name, _stub_annotation(s)) for s in option_specs(ChatSettings)],
        "EmbeddingFields": [(s.name, _stub_annotation(s)) for s in option_specs(EmbeddingSpec)],
    }
    for name, (base, _) in DERIVED.items():
        lines += ["", "", f"class {name}({base}):"]
        lines += [f"    {field}: {annotation} = ..." for field, annotation in sources[name]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(stub_source(), end="")
