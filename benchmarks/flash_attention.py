"""Flash attention on against off on the CPU, interleaved, for plain decoding and MTP.

The engine's default (``flash_attn=None``) turns flash attention off on a CPU-only build:
ggml's CPU flash-attention kernel walks the KV cache once per query row, so it costs
more as the context grows and a verify batch of ``n_draft + 1`` rows pays it per row.
This script is the measurement behind that default:

    .venv/bin/python benchmarks/flash_attention.py [--tokens 128,512] [--n-draft 0,2] [--threads 2] [--reps 3]

Every repetition runs each (tokens, n_draft, flash_attn) configuration once over the
held-out prompts, interleaved, so machine noise hits all of them alike. Medians of the
decode tokens/s go to a table (stdout and ``benchmarks/results/flash_attention.md``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
from pathlib import Path

from mtp_llm import MTP, Model

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="128,512", help="comma-separated generation lengths")
    parser.add_argument("--n-draft", default="0,2", help="comma-separated draft lengths (0 = plain)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=8, help="how many held-out prompts")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args()

    prompts = json.loads((ROOT / "benchmarks" / "prompts" / "heldout.json").read_text())["prompts"][: args.prompts]
    lengths = [int(x) for x in args.tokens.split(",")]
    drafts = [int(x) for x in args.n_draft.split(",")]
    model = Model.load_default()
    configs = list(itertools.product(lengths, drafts, (True, False)))
    sessions = {
        (tokens, k, fa): MTP(model, n_draft=k, n_ctx=max(lengths) + 512, n_threads=args.threads, flash_attn=fa)
        for tokens, k, fa in configs
    }
    for session in sessions.values():  # warm-up
        session.generate(prompts[0], max_tokens=16, temp=0)
    speeds: dict[tuple[int, int, bool], list[float]] = {c: [] for c in configs}
    for _ in range(args.reps):
        for config in configs:
            session = sessions[config]
            session.reset_stats()
            for prompt in prompts:
                session.generate(prompt, max_tokens=config[0], temp=0)
            speeds[config].append(session.stats().tokens_per_sec)

    lines = [
        f"Default model, {len(prompts)} held-out prompts, threads={args.threads}, {args.reps} interleaved reps; "
        "decode tokens/s, median (min-max).",
        "",
        "| tokens | config | flash attention on | off | off / on |",
        "|---|---|---|---|---|",
    ]
    for tokens, k in itertools.product(lengths, drafts):
        on, off = speeds[(tokens, k, True)], speeds[(tokens, k, False)]
        name = "plain" if k == 0 else f"mtp n_draft={k}"
        lines.append(
            f"| {tokens} | {name} | {statistics.median(on):.0f} ({min(on):.0f}-{max(on):.0f}) "
            f"| {statistics.median(off):.0f} ({min(off):.0f}-{max(off):.0f}) "
            f"| {statistics.median(off) / statistics.median(on):.2f} |"
        )
    table = "\n".join(lines)
    print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "flash_attention.md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
