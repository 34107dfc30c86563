"""Which LangChain run a call's MTP stats are reported to (the ``"mtp_stats"`` custom event
and the LangSmith run's metadata).

This exists because of how langchain-core (1.x) drives a chat model:

* ``BaseChatModel.stream`` / ``astream``, and ``invoke`` when it streams internally
  (``streaming=True``, or under ``astream_events``), create the LLM run's callback manager
  themselves and then call ``_stream`` / ``_astream`` *without* it, so the chat model
  cannot see the run it is producing for. ``ChatMTP.stream`` therefore saves its config in
  a context variable (:func:`streaming_config`), and :func:`stream_target` rebuilds the
  run's handlers from it; the run id is read back from the first chunk, whose message id
  langchain-core sets to ``lc_run--<run id>`` after the chunk is yielded (so the target is
  looked up when the stats arrive, not when the stream starts). Without a saved config
  (invoke-time streaming) the event goes to the enclosing run, if any.
* ``CallbackManager.configure`` adds the handlers named by the environment (the LangSmith
  tracer) as new instances on every call. The saved config has its callbacks configured
  once (:func:`streaming_config`), so the tracer that holds the run is the one the stats
  are reported to.
* There is no public API for adding metadata to a run while it is open:
  :func:`report` reaches into the LangSmith tracer's ``run_map`` (guarded, so a LangSmith
  change can only lose the metadata, never break a call).

For ``MTPLLM`` and for non-streamed chat calls LangChain does pass the run manager, and
:func:`run_target` uses it directly.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManager,
    AsyncCallbackManagerForLLMRun,
    BaseCallbackHandler,
    CallbackManager,
    CallbackManagerForLLMRun,
)
from langchain_core.callbacks.manager import adispatch_custom_event, dispatch_custom_event
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import LC_ID_PREFIX
from langchain_core.runnables import RunnableConfig, ensure_config

from ._integration import stats_payload
from .stats import STATS_KEY, MTPStats

logger = logging.getLogger(__name__)

RunManager = CallbackManagerForLLMRun | AsyncCallbackManagerForLLMRun

_stream_config: ContextVar[RunnableConfig | None] = ContextVar("mtp_llm_stream_config", default=None)
"""The config of the ChatMTP ``stream``/``astream`` call being set up."""


@dataclasses.dataclass(frozen=True, slots=True)
class Target:
    """Where a call's stats go: the handlers of its LLM run, and the run's id."""

    handlers: list[BaseCallbackHandler]
    inheritable: list[BaseCallbackHandler]
    tags: list[str]
    metadata: dict[str, Any]
    run_id: uuid.UUID

    def manager(self, cls: type[Any]) -> Any:
        """A (sync or async) callback manager whose events belong to the run."""
        return cls(
            handlers=self.handlers,
            inheritable_handlers=self.inheritable,
            parent_run_id=self.run_id,
            tags=self.tags,
            metadata=self.metadata,
        )

    @classmethod
    def of(cls, run_manager: RunManager | None) -> Target | None:
        if run_manager is None:
            return None
        return cls(
            run_manager.handlers,
            run_manager.inheritable_handlers,
            run_manager.tags,
            run_manager.metadata,
            run_manager.run_id,
        )

    @classmethod
    def rebuilt(cls, owner: BaseChatModel, config: RunnableConfig | None, message_id: str | None) -> Target | None:
        """The run's handlers as ``stream()`` configured them; the run id langchain-core wrote
        into the first yielded message's id (``lc_run--<uuid>``)."""
        if config is None or not message_id or not message_id.startswith(LC_ID_PREFIX):
            return None
        try:
            run_id = uuid.UUID(message_id[len(LC_ID_PREFIX) + 1 :])
        except ValueError:
            return None
        manager = CallbackManager.configure(
            config.get("callbacks"),
            owner.callbacks,
            owner.verbose,
            config.get("tags"),
            owner.tags,
            config.get("metadata"),
            owner.metadata,
        )
        return cls(manager.handlers, manager.inheritable_handlers, manager.tags, manager.metadata, run_id)


Targeter = Callable[[], "Target | None"]
"""Looked up when stats arrive: a streamed chat call learns its run id only from its first chunk."""


def run_target(run_manager: RunManager | None) -> Targeter:
    """The run LangChain handed to the call (None: report to the enclosing run, if any)."""
    target = Target.of(run_manager)
    return lambda: target


@contextmanager
def streaming_config(config: RunnableConfig | None, manager_cls: type[Any]) -> Iterator[RunnableConfig]:
    """Around ``BaseChatModel.stream``/``astream``: the config with its callbacks configured
    once (``manager_cls`` is ``CallbackManager`` or ``AsyncCallbackManager``), saved for
    :func:`stream_target`."""
    config = ensure_config(config)
    config["callbacks"] = manager_cls.configure(config.get("callbacks"))
    _stream_config.set(config)
    try:
        yield config
    finally:
        _stream_config.set(None)


def stream_target(
    owner: BaseChatModel, run_manager: RunManager | None, first_message_id: Callable[[], str | None]
) -> Targeter:
    """Where the stats of a chat model's streamed call go: the run manager if LangChain
    passed one, else the run rebuilt from the config :func:`streaming_config` saved and
    the id of the first message chunk (``first_message_id``, read when stats arrive)."""
    if run_manager is not None:
        return run_target(run_manager)
    config = _stream_config.get()
    _stream_config.set(None)  # read once: a nested call must not see this call's config
    return lambda: Target.rebuilt(owner, config, first_message_id())


def _event_data(stats: MTPStats, final: bool) -> dict[str, Any]:
    return {"stats": stats_payload(stats), "final": final}


def _add_trace_metadata(target: Target, stats: MTPStats) -> None:
    """Put the stats into the LangSmith run's metadata while the run is still open: the
    tracer's ``run_map`` holds the run tree, whose ``add_metadata`` feeds the posted
    ``extra.metadata``."""
    try:
        from langchain_core.tracers.langchain import LangChainTracer
    except ImportError:  # pragma: no cover
        return
    for handler in target.handlers:
        if not isinstance(handler, LangChainTracer):
            continue
        try:
            run = handler.run_map.get(str(target.run_id))
            add = getattr(run, "add_metadata", None)
            if callable(add):
                add({STATS_KEY: stats_payload(stats)})
        except Exception:
            logger.debug("could not add mtp stats to the LangSmith run", exc_info=True)


def report(target: Target | None, stats: MTPStats, final: bool) -> None:
    """Fire the ``mtp_stats`` custom event (and, at the end, the trace metadata)."""
    data = _event_data(stats, final)
    if target is None:
        # No run known (a chat model's invoke-time streaming): attach to the enclosing run, if any.
        try:
            dispatch_custom_event(STATS_KEY, data)
        except RuntimeError:
            pass
        return
    target.manager(CallbackManager).on_custom_event(STATS_KEY, data, run_id=target.run_id)
    if final:
        _add_trace_metadata(target, stats)


async def areport(target: Target | None, stats: MTPStats, final: bool) -> None:
    """Async :func:`report`."""
    data = _event_data(stats, final)
    if target is None:
        try:
            await adispatch_custom_event(STATS_KEY, data)
        except RuntimeError:
            pass
        return
    await target.manager(AsyncCallbackManager).on_custom_event(STATS_KEY, data, run_id=target.run_id)
    if final:
        _add_trace_metadata(target, stats)
