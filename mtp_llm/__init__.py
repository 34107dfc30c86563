"""mtp_llm: llama.cpp's native MTP speculative decoding for Python, LangChain and LlamaIndex.

>>> from mtp_llm import Model, MTP
>>> session = MTP(Model.load_default(), n_draft=3)
>>> text = session.generate("To be, or not to be", max_tokens=32, temp=0)
>>> session.stats().acceptance_rate  # doctest: +SKIP
"""

from __future__ import annotations

from .errors import (
    AmbiguousDraftError,
    ChatParseError,
    ChatTemplateError,
    ContextOverflowError,
    DecodeError,
    GenerationCancelledError,
    GenerationTimeoutError,
    GrammarError,
    IncompatibleDraftError,
    InvalidOptionError,
    InvalidPromptError,
    MissingMTPHeadError,
    ModelLoadError,
    MTPError,
    RPCConnectionError,
    SessionBusyError,
    StructuredOutputError,
    ToolSchemaError,
)
from .devices import CPUBackend, Device, GPUUnavailableWarning, cpu_backend, list_backends, list_devices
from .events import DoneEvent, EogEvent, Event, StatsEvent, TextScore, TokenEvent
from .model import MTP_ARCHITECTURES, Model
from .options import DraftLength, GenerationOptions, SessionOptions
from .session import MTP
from .stats import STATS_KEY, DraftControllerEstimates, MTPStats, TimingUs

__version__ = "0.1.0"

__all__ = [
    "MTP",
    "MTP_ARCHITECTURES",
    "STATS_KEY",
    "AmbiguousDraftError",
    "ChatParseError",
    "ChatTemplateError",
    "ContextOverflowError",
    "DecodeError",
    "CPUBackend",
    "Device",
    "GPUUnavailableWarning",
    "DoneEvent",
    "EogEvent",
    "Event",
    "GenerationCancelledError",
    "GenerationOptions",
    "SessionOptions",
    "DraftLength",
    "GenerationTimeoutError",
    "GrammarError",
    "IncompatibleDraftError",
    "InvalidOptionError",
    "InvalidPromptError",
    "MTPError",
    "MTPStats",
    "DraftControllerEstimates",
    "MissingMTPHeadError",
    "Model",
    "ModelLoadError",
    "RPCConnectionError",
    "SessionBusyError",
    "StatsEvent",
    "StructuredOutputError",
    "TimingUs",
    "TextScore",
    "TokenEvent",
    "ToolSchemaError",
    "cpu_backend",
    "list_backends",
    "list_devices",
]
