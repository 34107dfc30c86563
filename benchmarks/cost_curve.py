"""The cost probe against the engine's own timing buckets, and the cost model against measured speed.

    .venv/bin/python benchmarks/cost_curve.py --synthetic 150M --format f16 --threads 2 [--acceptance 0.75]
    .venv/bin/python benchmarks/cost_curve.py --model path.gguf --threads 2

For one model, interleaved in every repetition: the native probe (``mtp_llm.costs``), then plain
decoding and MTP at n_draft = 1..N through the engine. From the engine's counters: one-row pass =
plain ``t_verify / iters``; verify of k+1 rows = ``t_verify / iters`` at n_draft = k (every
iteration verifies k+1 rows only when every draft is accepted: a forced-acceptance model);
head time per iteration = ``t_draft / iters`` (k head passes plus the catch-up). The table puts
them beside the probe's figures, and the cost model's predicted speedup (at the measured
per-position acceptance) beside the measured one. Written to ``--out``/cost_curve.md.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from mtp_llm import MTP, Model
from mtp_llm.bench import DEFAULT_PROMPTS, conditional_rates, load_prompts, write_table
from mtp_llm.costs import CostCurve, accepted_distribution, measure_costs, median_curve

ROOT = Path(__file__).resolve().parents[1]


def head_ms(curve: CostCurve, k: int, rates: list[float]) -> float:
    """The head's expected time per iteration at the measured acceptance, for the engine's driver."""
    return sum(p * curve.head_ms(k, j) for j, p in enumerate(accepted_distribution(k, rates)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model")
    parser.add_argument("--synthetic", help="size of a synthetic hy_v3 model (mtp_llm.gguf.synthetic)")
    parser.add_argument("--acceptance", type=float, default=None)
    parser.add_argument("--format", default="f16")
    parser.add_argument("--n-draft", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--prompts", help="prompt file (default: the bench's 4 prompts)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--cost-reps", type=int, default=10)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args()

    if args.synthetic:
        from mtp_llm.gguf.synthetic import synthetic_model

        path = str(synthetic_model(args.synthetic, args.acceptance, args.format))
    else:
        path = args.model
    model = Model.load(path) if path else Model.load_default()
    prompts = load_prompts(args.prompts) if args.prompts else DEFAULT_PROMPTS
    ks = list(range(0, args.n_draft + 1))
    sessions = {k: MTP(model, n_draft=k, n_ctx=args.tokens + 512, n_threads=args.threads) for k in ks}
    curves: list[CostCurve] = []
    stats: dict[int, list[object]] = {k: [] for k in ks}
    for rep in range(args.reps + 1):
        curve = measure_costs(model, n_draft=args.n_draft, n_threads=args.threads, reps=args.cost_reps)
        for k, session in sessions.items():
            session.reset_stats()
            for prompt in prompts:
                session.generate(prompt, max_tokens=args.tokens, temp=0)
            if rep:
                stats[k].append(session.stats())
        if rep:
            curves.append(curve)

    def med(values: list[float]) -> float:
        return statistics.median(values)

    probe = median_curve(curves)
    plain_tps = med([s.tokens_per_sec for s in stats[0]])  # type: ignore[attr-defined]
    lines = [
        f"`{Path(model.path).name}`, threads={args.threads}, {len(prompts)} prompts x {args.tokens} tokens, "
        f"{args.reps} interleaved repetitions (probe: {args.cost_reps} per repetition); medians; "
        f"MTP driver: {probe.driver}.",
        "",
        "| n_draft | verify ms / iter (engine) | verify ms (probe) | head ms / iter (engine) "
        "| head ms / iter (probe, at the measured acceptance) | per-position acceptance "
        "| speedup measured | speedup predicted |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for k in ks:
        runs = stats[k]
        verify = med([s.timing_us.verify / s.iters / 1000 for s in runs])  # type: ignore[attr-defined]
        head = med([s.timing_us.draft / s.iters / 1000 for s in runs])  # type: ignore[attr-defined]
        tps = med([s.tokens_per_sec for s in runs])  # type: ignore[attr-defined]
        per_pos = list(runs[-1].acceptance_rate_per_position)  # type: ignore[attr-defined]
        if k == 0:
            lines.append(f"| plain | {verify:.3f} | {probe.target_ms[0]:.3f} | - | - | - | 1.00 | 1.00 |")
            continue
        rates = conditional_rates(per_pos)
        head_probe = head_ms(probe, k, rates)
        verify_probe = probe.verify_ms(k)
        lines.append(
            f"| {k} | {verify:.3f} | {verify_probe:.3f} | {head:.3f} | {head_probe:.3f} "
            f"| {'/'.join(f'{x:.2f}' for x in per_pos)} | {tps / plain_tps:.2f} "
            f"| {probe.speedup(k, rates):.2f} |"
        )
    lines += ["", f"Plain decoding: {plain_tps:.1f} t/s. Forced-acceptance model rows of the cost model:"]
    lines += ["n_draft=" + ", ".join(f"{k}: {probe.speedup(k, 1.0):.2f}x" for k in ks[1:])]
    write_table("\n".join(lines), args.out, "cost_curve.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
