"""A session takes ready GenerationOptions or keyword options, not both."""

from __future__ import annotations

import pytest

from mtp_llm import MTP, GenerationOptions, InvalidOptionError, SessionOptions


def test_stream_takes_ready_options_or_keywords_not_both(accept100_model) -> None:
    from mtp_llm import MTP

    session = MTP.from_options(accept100_model, SessionOptions(n_draft=2, n_ctx=256, n_threads=1))
    options = GenerationOptions(max_tokens=5, temp=0.0)
    assert session.generate("a", options=options) == session.generate("a", max_tokens=5, temp=0.0) == "aaaaa"
    with pytest.raises(InvalidOptionError, match="not both"):
        session.generate("a", options=options, max_tokens=3)


def test_session_reports_the_threads_it_decodes_on(random_model) -> None:
    import os

    assert MTP(random_model, n_ctx=512, n_threads=1).n_threads == 1
    assert MTP(random_model, n_ctx=512).n_threads == (os.cpu_count() or 4)  # unset: every core
