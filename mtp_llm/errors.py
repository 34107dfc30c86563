"""Exceptions raised by mtp_llm. Every one is an :class:`MTPError`.

The native engine checks user input before llama.cpp can abort the process and
raises the matching subclass with a message that says what to change.
"""

from __future__ import annotations

from typing import Any


class MTPError(Exception):
    """Base class of every mtp_llm error."""


class ModelLoadError(MTPError, OSError):
    """The model file is missing, unreadable, not a GGUF, or llama.cpp refused it."""


class MissingMTPHeadError(MTPError):
    """MTP was requested but no usable MTP head is loaded (none in the file,
    trunk-only file without a sidecar, or loaded with ``load_mtp=False``)."""


class IncompatibleDraftError(MTPError, ValueError):
    """The sidecar draft model does not match the target (width, vocabulary, architecture)."""


class AmbiguousDraftError(MTPError, ValueError):
    """``draft_model="auto"`` found several MTP head files that fit a trunk-only target (none
    named after it): the message lists them; pass the one to use as ``draft_model``."""


class ContextOverflowError(MTPError, ValueError):
    """The prompt plus ``max_tokens`` does not fit in the session's context."""


class InvalidPromptError(MTPError, ValueError):
    """The prompt is empty, has token ids outside the vocabulary, or has no content."""


class InvalidOptionError(MTPError, ValueError):
    """An option value is out of range or of the wrong type."""


class ChatTemplateError(MTPError, ValueError):
    """A chat template does not parse, or fails to render the messages and tools
    (the message names the template)."""


class ToolSchemaError(InvalidOptionError):
    """A tool's parameters schema cannot be turned into a grammar (the message names the tool)."""


class ChatParseError(MTPError, ValueError):
    """The model's output does not parse in its chat template's format."""


class StructuredOutputError(MTPError, ValueError):
    """An answer asked for as structured output does not parse: cut by ``max_tokens`` before its
    JSON closed, or JSON that does not match the schema. Carries ``text`` (the raw answer),
    ``finish_reason`` and ``stats`` (the call's :class:`~mtp_llm.MTPStats` dict, or None)."""

    def __init__(
        self, message: str, *, text: str = "", finish_reason: str | None = None, stats: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.text = text
        self.finish_reason = finish_reason
        self.stats = stats


class GrammarError(MTPError, ValueError):
    """The GBNF grammar does not parse."""


class SessionBusyError(MTPError, RuntimeError):
    """A generation is already running on this session in the same thread."""


class GenerationTimeoutError(MTPError, TimeoutError):
    """The call ran past its ``timeout``, generating or waiting for a slot (the message then says
    what holds the slots); the session stays usable."""


class GenerationCancelledError(MTPError):
    """The generation was cancelled with :meth:`MTP.cancel`; the session stays usable."""


class RPCConnectionError(MTPError, ConnectionError):
    """The connection to an RPC server holding part of the model was lost (server stopped,
    machine gone): the model's layers on it are gone; restart the server and load the model
    again. Unreachable or incompatible servers at load time raise :class:`ModelLoadError`."""


class DecodeError(MTPError, RuntimeError):
    """llama.cpp failed while decoding (out of memory, backend failure)."""


__all__ = [
    "AmbiguousDraftError",
    "ChatParseError",
    "ChatTemplateError",
    "ContextOverflowError",
    "DecodeError",
    "GenerationCancelledError",
    "GenerationTimeoutError",
    "GrammarError",
    "IncompatibleDraftError",
    "InvalidOptionError",
    "InvalidPromptError",
    "MTPError",
    "MissingMTPHeadError",
    "ModelLoadError",
    "RPCConnectionError",
    "SessionBusyError",
    "StructuredOutputError",
    "ToolSchemaError",
]
