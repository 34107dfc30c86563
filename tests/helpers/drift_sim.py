"""The parallel bench (`mtp-llm bench --parallel 1,2,4`), simulated on a machine whose speed drifts, driving the real draft-length
controller (``mtp_llm._core.internals.DraftController``): what a controller change does to auto against the fixed
lengths when round times change by tens of percent over seconds, without the bench's own noise.
``benchmarks/controller_drift.py`` prints it per seed; the controller's unit tests assert on it."""

from __future__ import annotations

import random
from collections.abc import Callable

from mtp_llm import _core

EPYC_ROUND_US = {
    1: [10500, 17500, 20000, 23000, 27000],
    2: [14000, 18000, 24500, 31500, 40000],
    4: [13500, 22500, 32000, 43000, 55000],
}
"""Round times (us) at 0 to 4 drafts by number of streams: the 128M f16 hy_v3 at 0.75 on the project's AMD EPYC
(traces at 2 threads), where the best length is 2-3 for one stream, 1-2 for two and 1 for four."""

Choose = Callable[[_core.internals.DraftController, int], int]
"""A round's draft length from the controller and the number of live streams (auto: ``c.choose(4, live, 2)``)."""


def bench_in_spells(
    choose: Choose, seed: int, reps: int = 12, tokens: int = 96, drift: bool = True, acceptance: float = 0.75
) -> dict[int, float]:
    """`mtp-llm bench --parallel 1,2,4` on one session through a machine whose speed drifts: spells of 0.2-1 s at
    1.0-1.5x the round times (as a 2-core VM's rounds do; none with ``drift=False``), 5% jitter.
    Batches of 1, 2 and 4 streams of `tokens` each, drafts accepted at `acceptance` per position, after a warm-up
    repetition; committed tokens per us by number of streams."""
    rng = random.Random(seed)
    spells = random.Random(seed + 1000)  # the same drift in time whatever runs
    c = _core.internals.DraftController(4)
    clock = spell_end = 0.0
    slow = 1.0
    made = {n: 0.0 for n in EPYC_ROUND_US}
    spent = {n: 0.0 for n in EPYC_ROUND_US}
    for rep in range(1 + reps):  # a warm-up repetition, not counted, as the bench's
        for streams, costs in EPYC_ROUND_US.items():
            c.interrupt()
            left = [tokens] * streams
            while any(left):
                live = sum(1 for t in left if t > 0)
                k = choose(c, live)
                for i, t in enumerate(left):
                    if t > 0:
                        accepted = 0
                        while accepted < k and rng.random() < acceptance:
                            accepted += 1
                        c.observe_acceptance(k, accepted)
                        left[i] = max(0, t - 1 - accepted)
                        made[streams] += min(t, 1 + accepted) if rep else 0
                while clock >= spell_end:
                    spell_end += spells.uniform(2e5, 1e6)
                    slow = spells.uniform(1.0, 1.5) if drift else 1.0
                us = EPYC_ROUND_US.get(live, costs)[k] * slow * (1 + 0.05 * rng.random())  # 3 streams: as 4
                c.observe_cost(k, live, int(us), 1000 * k * live, False, 2)
                clock += us
                spent[streams] += us if rep else 0
    return {n: made[n] / spent[n] for n in EPYC_ROUND_US}


def auto_vs_best_fixed(seed: int, drift: bool = True, acceptance: float = 0.75) -> dict[int, tuple[float, int]]:
    """Per number of streams: auto's tokens/us over the best fixed length's, and that length."""
    auto = bench_in_spells(lambda c, live: c.choose(4, live, 2), seed, drift=drift, acceptance=acceptance)
    fixed = [bench_in_spells(lambda c, live, k=k: k, seed, drift=drift, acceptance=acceptance) for k in range(5)]
    out = {}
    for n in EPYC_ROUND_US:
        best = max(range(5), key=lambda k: fixed[k][n])
        out[n] = (auto[n] / fixed[best][n], best)
    return out
