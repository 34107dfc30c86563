"""The automatic draft length in the parallel bench (`mtp-llm bench --parallel`) on a simulated drifting
machine (tests/helpers/drift_sim.py): auto / best fixed length per seed and number of streams, and the means. A
controller change is compared by running this before and after it (seconds; no timing, so it may run beside
anything).

    python benchmarks/controller_drift.py --seeds 8 [--no-drift] [--acceptance 1.0]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.helpers.drift_sim import EPYC_ROUND_US, auto_vs_best_fixed  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--no-drift", action="store_true", help="round times without spells (jitter only)")
    ap.add_argument("--acceptance", type=float, default=0.75, help="each draft position's acceptance (1.0: forced)")
    args = ap.parse_args()
    per_streams: dict[int, list[float]] = {n: [] for n in EPYC_ROUND_US}
    for seed in range(args.seeds):
        ratios = auto_vs_best_fixed(seed, drift=not args.no_drift, acceptance=args.acceptance)
        print(f"seed {seed}: " + "  ".join(f"{n} streams {r:.3f} (best {k})" for n, (r, k) in ratios.items()))
        for n, (r, _) in ratios.items():
            per_streams[n].append(r)
    print("mean:   " + "  ".join(f"{n} streams {statistics.mean(v):.3f}" for n, v in per_streams.items()))


if __name__ == "__main__":
    main()
