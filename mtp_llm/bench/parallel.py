"""``mtp-llm bench --parallel 1,2,4``: aggregate throughput of concurrent streams on one
session (``n_parallel`` slots), plain decoding and MTP, measured interleaved.

Each measurement starts N threads together, each generating the same number of tokens
greedily from its own prompt on a session with ``n_parallel`` = the largest N; aggregate
tokens/s = all tokens over the wall time from the start to the last stream's end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from collections.abc import Sequence
from typing import Any

from ..options import DraftLength
from .common import draft_lengths


def _streams(session: Any, prompts: Sequence[str], tokens: int) -> tuple[float, Any]:
    """Run one stream per prompt at once; (wall seconds, session stats of the run)."""
    session.reset_stats()
    start = threading.Barrier(len(prompts) + 1)
    errors: list[BaseException] = []

    def work(prompt: str) -> None:
        start.wait()
        try:
            session.generate(prompt, max_tokens=tokens, temp=0)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(p,)) for p in prompts]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return wall, session.stats()


def run_parallel(
    model_path: str | None,
    levels: Sequence[int],
    n_drafts: Sequence[DraftLength],
    prompts: Sequence[str],
    tokens: int,
    threads: int | None,
    reps: int,
    warmup: int,
    n_gpu_layers: int = 0,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows per (n_draft, streams): aggregate and per-stream tokens/s (median over reps,
    with min-max), the ratio to one stream of the same n_draft, acceptance, calls per verify batch."""
    from ..model import Model
    from ..session import MTP

    model = (
        Model.load(model_path, n_gpu_layers=n_gpu_layers) if model_path else Model.load_default(n_gpu_layers=n_gpu_layers)
    )
    n_max = max(levels)
    if len(prompts) < n_max:
        prompts = [prompts[i % len(prompts)] + f" ({i})" for i in range(n_max)]
    n_ctx_slot = max(256, tokens + 256)
    sessions = {
        k: MTP(model, n_draft=k, n_parallel=n_max, n_ctx=n_ctx_slot * n_max, n_threads=threads) for k in n_drafts
    }
    walls: dict[tuple[DraftLength, int], list[float]] = {(k, n): [] for k in n_drafts for n in levels}
    last: dict[tuple[DraftLength, int], Any] = {}
    lengths: dict[tuple[DraftLength, int], list[int]] = {}  # iterations per drafted length, over the reps
    for rep in range(warmup + reps):
        # Each number of streams runs every configuration back to back, in an order that turns
        # with the repetition: a configuration compared with another ran beside it, not minutes
        # later nor always after the same neighbour (this machine's speed drifts by 15-30% over seconds).
        for n in levels:
            for turn in range(len(n_drafts)):
                k = n_drafts[(turn + rep) % len(n_drafts)]
                wall, stats = _streams(sessions[k], prompts[:n], tokens)
                if rep >= warmup:
                    walls[(k, n)].append(wall)
                    last[(k, n)] = stats
                    counts = lengths.setdefault((k, n), [0] * len(stats.draft_length_counts))
                    for length, c in enumerate(stats.draft_length_counts):
                        counts[length] += c
    rows = []
    for k in n_drafts:
        base = statistics.median(tokens / w for w in walls[(k, 1)]) if 1 in levels else 0.0
        for n in levels:
            agg = [n * tokens / w for w in walls[(k, n)]]
            stats = last[(k, n)]
            rows.append(
                {
                    "n_draft": k,
                    "streams": n,
                    "aggregate_tps": statistics.median(agg),
                    "aggregate_tps_min": min(agg),
                    "aggregate_tps_max": max(agg),
                    "per_stream_tps": statistics.median(agg) / n,
                    "ratio_to_one_stream": statistics.median(agg) / base if base else 0.0,
                    "acceptance_rate": stats.acceptance_rate,
                    "mean_calls_per_batch": stats.mean_calls_per_batch,
                    "draft_length_counts": lengths[(k, n)],
                    "walls_s": walls[(k, n)],  # per repetition, in run order (for paired comparisons)
                }
            )
    _add_auto_vs_best_fixed(rows, walls, n_drafts, levels)
    first = next(iter(sessions.values()))
    meta = {
        "model": str(model.path),
        "n_params": model.n_params,
        "tokens": tokens,
        "threads": threads,
        "reps": reps,
        "warmup": warmup,
        "n_parallel": n_max,
        "n_ctx_slot": first.n_ctx_slot,
        "cache_bytes_per_slot": {str(k): s.cache_bytes // n_max for k, s in sessions.items()},
        "mtp_driver": {str(k): s.mtp_driver for k, s in sessions.items()},
    }
    return rows, meta


def _add_auto_vs_best_fixed(
    rows: list[dict[str, Any]],
    walls: dict[tuple[DraftLength, int], list[float]],
    n_drafts: Sequence[DraftLength],
    levels: Sequence[int],
) -> None:
    """On each "auto" row: the best fixed length at its number of streams (highest median) and auto's
    speed over it as the median of per-repetition ratios. A repetition runs every configuration back to
    back, so its ratio cancels the machine's slower and faster minutes, which a ratio of medians keeps."""
    fixed = [k for k in n_drafts if k != "auto"]
    if "auto" not in n_drafts or not fixed:
        return
    by_key = {(r["n_draft"], r["streams"]): r for r in rows}
    for n in levels:
        best = max(fixed, key=lambda k: by_key[(k, n)]["aggregate_tps"])
        ratios = [b / a for a, b in zip(walls[("auto", n)], walls[(best, n)])]  # (n*tokens/a) / (n*tokens/b)
        row = by_key[("auto", n)]
        row["best_fixed"] = best
        row["vs_best_fixed"] = statistics.median(ratios)
        row["vs_best_fixed_min"] = min(ratios)
        row["vs_best_fixed_max"] = max(ratios)


def markdown(rows: Sequence[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        "| n_draft | streams | aggregate tokens/s (median, min-max) | per stream | x one stream | acceptance | calls per verify "
        "| iterations per drafted length 0..n |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['n_draft']} | {r['streams']} | {r['aggregate_tps']:.1f} ({r['aggregate_tps_min']:.1f}-"
            f"{r['aggregate_tps_max']:.1f}) | {r['per_stream_tps']:.1f} | {r['ratio_to_one_stream']:.2f}x | "
            f"{r['acceptance_rate']:.3f} | {r['mean_calls_per_batch']:.2f} | "
            f"{'/'.join(map(str, r['draft_length_counts']))} |"
        )
    for r in rows:
        if "vs_best_fixed" in r:
            lines.append("")
            lines.append(
                f"auto vs the best fixed length at {r['streams']} stream(s) (n_draft {r['best_fixed']}): "
                f"{r['vs_best_fixed']:.3f}x, the median of per-repetition ratios "
                f"({r['vs_best_fixed_min']:.3f}-{r['vs_best_fixed_max']:.3f})"
            )
    per_slot = ", ".join(f"n_draft={k}: {b / 2**20:.1f} MiB" for k, b in meta["cache_bytes_per_slot"].items())
    lines.append("")
    lines.append(f"Cache memory per slot ({meta['n_ctx_slot']} tokens, target + MTP head): {per_slot}.")
    return "\n".join(lines)


def cmd_parallel(args: argparse.Namespace, model_path: str | None, prompts: Sequence[str]) -> int:
    levels = sorted({int(x) for x in args.parallel.split(",") if x.strip()})
    if not levels or levels[0] < 1:
        raise SystemExit("mtp-llm bench: --parallel takes stream counts >= 1, e.g. 1,2,4")
    n_drafts = draft_lengths(args.n_draft)
    if 0 not in n_drafts:
        n_drafts = [0, *n_drafts]
    rows, meta = run_parallel(
        model_path, levels, n_drafts, prompts, args.tokens, args.threads, args.reps, args.warmup, args.n_gpu_layers
    )
    from .common import write_table

    md = write_table(markdown(rows, meta), args.out, "parallel.md")
    (md.parent / "parallel.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(f"\nwrote {md}, {md.parent / 'parallel.json'}")
    return 0
