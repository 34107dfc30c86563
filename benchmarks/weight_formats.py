"""Plain against MTP decoding on the default model stored as f32, f16, bf16 and q8_0.

The weight format picks the CPU kernels: a single token goes through ggml's dot products, a
verify batch of n_draft + 1 tokens through llamafile's tinyBLAS, and how much cheaper per row
the batch is differs by format. This measures it:

    .venv/bin/python benchmarks/weight_formats.py [--formats f16,q8_0] [--n-draft 0,1,2,3] [--threads 2] [--reps 3]

The variants are written from the shipped f16 file into a temporary directory (f32 and bf16
hold the same values; q8_0 rounds them). Every repetition (after one warm-up) runs each
(format, n_draft) configuration once over the held-out prompts, interleaved. The table (stdout and
``benchmarks/results/weight_formats.md``) gives median decode tokens/s, the ratio to plain
decoding of the same format, acceptance, and the verify and draft time per iteration.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
from pathlib import Path

from mtp_llm import MTP, Model
from mtp_llm.bench import load_prompts, median_span, run_interleaved, write_table
from mtp_llm.default_model import default_model_path
from mtp_llm.gguf.hyv3 import read_hy_v3, write_hy_v3

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--formats", default="f32,f16,bf16,q8_0")
    parser.add_argument("--n-draft", default="0,1,2,3", help="comma-separated draft lengths (0 = plain)")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args()

    prompts = load_prompts(str(ROOT / "benchmarks" / "prompts" / "heldout.json"))
    formats = args.formats.split(",")
    drafts = sorted({0, *(int(x) for x in args.n_draft.split(","))})
    config, tensors, vocab, template = read_hy_v3(default_model_path())
    with tempfile.TemporaryDirectory() as tmp:
        models = {}
        for fmt in formats:
            path = Path(tmp) / f"default-{fmt}.gguf"
            write_hy_v3(path, config, tensors, vocab, file_type=fmt, chat_template=template)  # type: ignore[arg-type]
            models[fmt] = Model.load(path)
        sessions = {
            (fmt, k): MTP(models[fmt], n_draft=k, n_ctx=args.tokens + 512, n_threads=args.threads)
            for fmt, k in itertools.product(formats, drafts)
        }
        runs = run_interleaved(sessions, prompts, args.tokens, args.reps)

    lines = [
        f"Default model, {len(prompts)} held-out prompts x {args.tokens} tokens, threads={args.threads}, "
        f"{args.reps} interleaved reps; engine defaults otherwise.",
        "",
        "| weights | config | decode t/s (median, min-max) | x plain (same weights) | acceptance "
        "| verify ms / iteration | draft ms / iteration |",
        "|---|---|---|---|---|---|---|",
    ]
    for (fmt, k), stats_per_rep in runs.items():
        values = [s.tokens_per_sec for s in stats_per_rep]
        stats = stats_per_rep[-1]
        plain = statistics.median(s.tokens_per_sec for s in runs[(fmt, 0)])
        iters = max(1, stats.iters)
        lines.append(
            f"| {fmt} | {'plain' if k == 0 else f'mtp n_draft={k}'} | {median_span(values)} "
            f"| {statistics.median(values) / plain:.2f} | {stats.acceptance_rate:.3f} "
            f"| {stats.timing_us.verify / iters / 1000:.2f} | {stats.timing_us.draft / iters / 1000:.2f} |"
        )
    write_table("\n".join(lines), args.out, "weight_formats.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
