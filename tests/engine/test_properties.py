"""Property-based: any combination of generation options either works or raises MTPError."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mtp_llm import MTP, MTPError, TokenEvent

numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=32), st.integers(-5, 5), st.none(), st.just("x")
)
options = st.fixed_dictionaries(
    {},
    optional={
        "max_tokens": st.one_of(st.integers(-3, 40), st.none(), st.just(2.5)),
        "temp": numbers,
        "top_k": st.one_of(st.integers(-3, 300), st.none()),
        "top_p": numbers,
        "min_p": numbers,
        "seed": st.one_of(st.integers(-1, 2**33), st.none()),
        "repeat_penalty": numbers,
        "frequency_penalty": numbers,
        "presence_penalty": numbers,
        "penalty_last_n": st.one_of(st.integers(-3, 100), st.none()),
        "n_draft": st.one_of(st.integers(-2, 6), st.none()),
        "reasoning_budget": st.one_of(st.integers(-3, 5), st.none(), st.just(1.5)),
        "stop": st.one_of(st.none(), st.text(max_size=4), st.lists(st.text(max_size=4), max_size=3)),
        "timeout": st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.just(-1)),
        "emit_stats_every": st.one_of(st.integers(-2, 5), st.none()),
        "grammar": st.one_of(st.none(), st.sampled_from(['root ::= "a"', "root ::= (", "", 'root ::= [a-z]+'])),
    },
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(opts=options, prompt=st.one_of(st.text(max_size=12), st.lists(st.integers(-2, 300), max_size=6)))
def test_options_work_or_raise_mtp_error(random_session: MTP, opts: dict, prompt: object) -> None:
    try:
        events = list(random_session.stream_events(prompt, **opts))
    except MTPError:
        pass
    else:
        assert any(isinstance(e, TokenEvent) for e in events)
    # The session is always left reusable.
    assert random_session.generate("Hi", max_tokens=3, temp=0)
