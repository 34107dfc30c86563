"""Shared decodes padded to one pass against llama.cpp's split (``MTP_LLM_NO_PADDING``), interleaved.

    .venv/bin/python benchmarks/padding_ab.py --acceptance 0.75 --n-draft 0,1,2,auto --reps 6 --out DIR

For each draft length, two sessions (``n_parallel=4``) of the synthetic 128M f16 model at
``--acceptance``, or of ``--model`` (``default``: the built-in model): one padding
its shared decodes (the default), one made with ``MTP_LLM_NO_PADDING=1``. Every repetition runs the
bench's batches of 1, 2 and 4 concurrent greedy calls of 96 tokens on every session in turn (the order
rotating between repetitions); the slots a call gets follow from the prompt cache, as in ``mtp-llm bench
--parallel``, so some batches run in slots that are not adjacent. Reported: aggregate tokens/s
(medians) and the median of per-repetition ratios padded / split. One warm-up repetition not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

from mtp_llm import MTP, Model
from mtp_llm.bench import SYNTHETIC_PROMPTS
from mtp_llm.bench.parallel import _streams
from mtp_llm.default_model import default_model_path
from mtp_llm.gguf.synthetic import synthetic_model

STREAMS = (1, 2, 4)
TOKENS = 96


def batch(session: MTP, n: int) -> float:
    """Wall time of n concurrent calls started together."""
    return _streams(session, list(SYNTHETIC_PROMPTS[:n]), TOKENS)[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--acceptance", type=float, default=0.75, help="per-position acceptance (1.0: forced)")
    ap.add_argument("--model", help="a GGUF file or 'default' (the built-in model) instead of the synthetic one")
    ap.add_argument("--n-draft", default="0,1,2,auto")
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    if args.model:
        model = Model.load(str(default_model_path()) if args.model == "default" else args.model)
    else:
        model = Model.load(synthetic_model("128M", args.acceptance if args.acceptance < 1 else None, "f16"))
    lengths = args.n_draft.split(",")
    sessions: dict[tuple[str, str], MTP] = {}
    for k in lengths:
        for variant in ("padded", "split"):
            if variant == "split":
                os.environ["MTP_LLM_NO_PADDING"] = "1"  # read when the session is made
            sessions[(k, variant)] = MTP(model, n_draft=k if k == "auto" else int(k), n_parallel=4,
                                         n_ctx=352 * 4, n_threads=args.threads)
            os.environ.pop("MTP_LLM_NO_PADDING", None)
    names = list(sessions)
    walls: dict[tuple[tuple[str, str], int], list[float]] = {(k, n): [] for k in names for n in STREAMS}
    for rep in range(args.reps + 1):
        for n in STREAMS:
            for turn in range(len(names)):
                name = names[(turn + rep) % len(names)]
                wall = batch(sessions[name], n)
                if rep:
                    walls[(name, n)].append(wall)
    lines = [
        f"# Padded shared decodes against llama.cpp's split, "
        + (f"model {args.model}" if args.model else f"synthetic 128M f16, acceptance {args.acceptance}"),
        "",
        "| n_draft | streams | padded t/s | split t/s | padded / split (median, min-max) | padding rows per call |",
        "|---|---|---|---|---|---|",
    ]
    for k in lengths:
        padded = sessions[(k, "padded")].stats()
        per_call = padded.padding_rows / padded.generations if padded.generations else 0.0
        for n in STREAMS:
            a, b = walls[((k, "padded"), n)], walls[((k, "split"), n)]
            ratios = [y / x for x, y in zip(a, b)]
            lines.append(
                f"| {k} | {n} | {n * TOKENS / statistics.median(a):.1f} | {n * TOKENS / statistics.median(b):.1f} | "
                f"{statistics.median(ratios):.3f} ({min(ratios):.2f}-{max(ratios):.2f}) | "
                f"{per_call:.1f} (all streams) |"
            )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "padding.md").write_text("\n".join(lines) + "\n")
    (args.out / "padding.json").write_text(
        json.dumps({f"{k[0]}/{k[1]}|{n}": v for (k, n), v in walls.items()}, indent=1) + "\n"
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
