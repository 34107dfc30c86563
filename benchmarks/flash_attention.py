"""Flash attention on against off on the CPU, interleaved, for plain decoding and MTP.

ggml's CPU flash-attention kernel walks the KV cache once per query row, so it costs
more as the context grows and a verify batch of ``n_draft + 1`` rows pays it per row;
without it the attention products are multi-column matmuls that round differently from a
one-row pass (greedy MTP then is not bit-identical to plain decoding). The engine's
default (``flash_attn=None``) turns it on for a CPU-only build; this script measures the
price per model:

    .venv/bin/python benchmarks/flash_attention.py [--tokens 128,512] [--n-draft 0,2] [--threads 2] [--reps 3] [--model M]

For each generation length, every repetition (after one warm-up) runs each
(n_draft, flash_attn) configuration once over the held-out prompts, interleaved, so
machine noise hits on and off alike. Medians of the
decode tokens/s go to a table (stdout and ``benchmarks/results/flash_attention.md``).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
from pathlib import Path

from mtp_llm import MTP, Model
from mtp_llm.bench import load_prompts, median_span, run_interleaved, write_table

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="128,512", help="comma-separated generation lengths")
    parser.add_argument("--n-draft", default="0,2", help="comma-separated draft lengths (0 = plain)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=8, help="how many held-out prompts")
    parser.add_argument("--model", help="a GGUF with an MTP head (default: the built-in model)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args()

    prompts = load_prompts(str(ROOT / "benchmarks" / "prompts" / "heldout.json"))[: args.prompts]
    lengths = [int(x) for x in args.tokens.split(",")]
    drafts = [int(x) for x in args.n_draft.split(",")]
    model = Model.load(args.model) if args.model else Model.load_default()
    speeds: dict[tuple[int, int, bool], list[float]] = {}
    for tokens in lengths:  # one interleaved round per generation length
        sessions = {
            (tokens, k, fa): MTP(model, n_draft=k, n_ctx=max(lengths) + 512, n_threads=args.threads, flash_attn=fa)
            for k, fa in itertools.product(drafts, (True, False))
        }
        for key, runs in run_interleaved(sessions, prompts, tokens, args.reps).items():
            speeds[key] = [s.tokens_per_sec for s in runs]

    lines = [
        f"{Path(args.model).name if args.model else 'Default model'}, {len(prompts)} held-out prompts, threads={args.threads}, {args.reps} interleaved reps; "
        "decode tokens/s, median (min-max).",
        "",
        "| tokens | config | flash attention on | off | off / on |",
        "|---|---|---|---|---|",
    ]
    for tokens, k in itertools.product(lengths, drafts):
        on, off = speeds[(tokens, k, True)], speeds[(tokens, k, False)]
        name = "plain" if k == 0 else f"mtp n_draft={k}"
        ratio = statistics.median(off) / statistics.median(on)
        lines.append(f"| {tokens} | {name} | {median_span(on)} | {median_span(off)} | {ratio:.2f} |")
    name = f"flash_attention-{Path(args.model).stem}.md" if args.model else "flash_attention.md"
    write_table("\n".join(lines), args.out, name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
