"""The automatic draft length's controller on its own (n_draft="auto"), fed exact costs:
no model is loaded."""

from __future__ import annotations

from typing import Any

import pytest

from mtp_llm import _core


def drive(
    controller: _core.DraftController,
    iterations: int,
    cost_us: Any,
    accepted: Any,
    limit: int = 4,
) -> list[int]:
    """Run the controller against a machine whose iteration of k drafts takes
    cost_us(k) and accepts accepted(k, i) of them (i = iteration number)."""
    chosen = []
    for i in range(iterations):
        k = controller.choose(limit)
        chosen.append(k)
        controller.observe(k, accepted(k, i) if k else 0, int(cost_us(k)), int(100 * k), False)
    return chosen



def test_controller_drafts_the_longest_when_every_draft_pays() -> None:
    c = _core.DraftController(4)
    chosen = drive(c, 200, lambda k: 1000 + 150 * k, lambda k, i: k)
    assert chosen[:4] == [0, 0, 0, 0]  # plain decoding is measured first (steady passes only)
    # Then the longest draft, but for a burst of 3 at a neighbouring length every 32 iterations.
    assert chosen[-100:].count(4) >= 85, chosen[-100:]
    est = c.estimates()
    assert est.iteration_us == pytest.approx([1000, 1150, 1300, 1450, 1600])
    assert est.acceptance[0] > 0.99 and est.acceptance[3] > 0.99



def test_controller_stays_plain_when_drafting_never_pays_and_probes_ever_less_often() -> None:
    c = _core.DraftController(4)
    # Every draft rejected: an iteration commits one token at a higher cost.
    chosen = drive(c, 3000, lambda k: 1000 + 600 * k, lambda k, i: 0)
    drafting = [i for i, k in enumerate(chosen) if k]
    # Exploration (a burst at k=1) plus probes of 3 iterations at doubling intervals.
    assert len(drafting) <= 3 + 3 * 7, drafting
    assert sum(1 for k in chosen if k) / len(chosen) < 0.01
    assert c.estimates().probe_interval == 1024



def test_controller_reaches_the_best_fixed_length_throughput() -> None:
    """Acceptance 0.6 per position, verify rows nearly free, head steps costly: E(k)/T(k)
    peaks at k = 1 (1.6/1.35 = 1.19 tokens per 1000 us; k = 2: 1.15, plain 1.0)."""
    import random

    def run(choose: Any, iterations: int = 4000) -> float:
        rng = random.Random(7)
        tokens = time = 0.0
        c = _core.DraftController(4)
        for _ in range(iterations):
            k = choose(c)
            n = 0
            while n < k and rng.random() < 0.6:
                n += 1
            us = 1000 + 350 * k
            c.observe(k, n, us, 100 * k, False)
            tokens += 1 + n
            time += us
        return tokens / time

    auto = run(lambda c: c.choose(4))
    best_fixed = max(run(lambda c, k=k: k) for k in range(5))
    assert auto >= 0.97 * best_fixed, (auto, best_fixed)



def test_controller_follows_acceptance_changes_both_ways() -> None:
    c = _core.DraftController(4)
    high, low = (lambda k, i: k), (lambda k, i: 0)
    cost = lambda k: 1000 + 300 * k  # noqa: E731
    drive(c, 300, cost, high)
    assert c.choose(4) == 4
    after_drop = drive(c, 300, cost, low)
    assert after_drop[-200:].count(0) > 190  # back to plain decoding within a few iterations
    recovered = drive(c, 600, cost, high)
    assert recovered[-100:].count(4) > 90  # a probe found the drafts good again



def test_controller_respects_the_limit() -> None:
    c = _core.DraftController(4)
    drive(c, 100, lambda k: 1000 + 100 * k, lambda k, i: k)
    assert {c.choose(2) for _ in range(10)} <= {0, 1, 2}
    assert c.choose(0) == 0



def test_controller_ignores_a_preempted_iteration() -> None:
    c = _core.DraftController(2)
    drive(c, 50, lambda k: 1000 + 100 * k, lambda k, i: k, limit=2)
    c.observe(2, 2, 10_000_000, 200, False)  # the process was descheduled for 10 s
    assert c.estimates().iteration_us[2] < 1000 + 200 + 0.25 * (2 * 1200)
    assert c.choose(2) == 2
