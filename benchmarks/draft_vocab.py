"""Trimmed draft vocabularies (docs/draft-vocab.md): two measurements, one interleaved run.

1. SmolLM2-135M-Instruct (vocab 49,152; ``mtp_llm.smollm2``, its head embedded as
   ``...-mtp-initial.gguf`` or ``--smollm2-head``): draft time per drafted token with N-token heads
   (default 4096, 8192, 16384) against the full head, all q8_0 sidecars, the fused driver's greedy
   runs alternated; each head's acceptance, and the kept set's coverage of the target's greedy
   tokens on held-out prompts (what a trained head can lose at most: a draft the full head gets
   right is a target token, and the trimmed head drafts it too when it is kept).
2. A synthetic hy_v3 model with vocab 248,320 and n_embd 1024 at calibrated acceptance 0.75
   (``--format``, default q8_0): tokens/s of MTP with the full head and with a 32k trimmed head
   (sidecars of the same type), at every
   n_draft, interleaved; the ratio of the best of each. The trimmed set is the model's own greedy
   output on the bench prompts (a synthetic model walks a cycle through its whole vocabulary).

Usage (run under ``chrt -f 50`` on a busy machine):
    python benchmarks/draft_vocab.py [--part smollm2|synthetic|both] [--threads 2] [--out DIR]
Writes ``DIR/draft_vocab.md`` (default benchmarks/results/draft_vocab).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from mtp_llm import MTP, Model, TokenEvent
from mtp_llm import draft_vocab as dv
from mtp_llm.bench.common import SYNTHETIC_PROMPTS
from mtp_llm.gguf.draft_head import write_draft_head
from mtp_llm.gguf.synthetic import synthetic_model


def interleaved(model: Model, heads: dict[str, Model], n_drafts: list[int], prompts: list[str], tokens: int,
                reps: int, threads: int, **opts: Any) -> dict[tuple[str, int], list[Any]]:
    """Each rep runs every (head, n_draft) session on every prompt in turn; returns the stats per rep."""
    sessions = {(name, k): MTP(model, draft_model=head, n_draft=k, n_ctx=tokens + 256, n_threads=threads, **opts)
                for name, head in heads.items() for k in n_drafts}
    out: dict[tuple[str, int], list[Any]] = {key: [] for key in sessions}
    for rep in range(reps + 1):
        for key, s in sessions.items():
            s.reset_stats()
            for p in prompts:
                s.generate(p, max_tokens=tokens, temp=0)
            if rep:  # the first is a warm-up
                out[key].append(s.stats())
    return out


HELD_OUT = [
    "What is the capital of France?", "Explain photosynthesis in simple terms.", "Write a short poem about the sea.",
    "How do airplanes stay in the air?", "Write a friendly email inviting a friend to dinner.",
    "What are the benefits of regular exercise?", "Describe a cat to someone who has never seen one.",
    "List five fruits that are rich in vitamin C.", "What is a prime number?", "How do I make a cup of tea?",
    "Tell me a fun fact about octopuses.", "What does a computer's CPU do?",
]
"""Prompts not in the built-in set (mtp_llm.draft_vocab.PROMPTS): the trimmed set's coverage of
the target's own greedy tokens on them bounds the acceptance a trimmed head can lose."""


def smollm2_part(args: argparse.Namespace, out: Path) -> list[str]:
    from mtp_llm import smollm2

    source = Path(args.smollm2_head) if args.smollm2_head else smollm2.converted_path(None)  # the initial head
    model = Model.load(source, load_mtp=False)
    start = time.perf_counter()
    counts = dv.token_frequencies(model, n_threads=args.threads)
    t_count = time.perf_counter() - start
    keep = dv.special_token_ids(source)
    sizes = [int(n) for n in args.sizes.split(",")]
    ids = {n: dv.draft_vocab_ids(counts, n, keep) for n in sizes}
    # Coverage: the target's greedy tokens on held-out prompts that the N kept tokens include.
    plain = MTP(model, n_draft=0, n_ctx=1024, n_threads=args.threads, flash_attn=True)
    generated: list[int] = []
    for p in HELD_OUT:
        prompt = model.tokenize(model.apply_chat_template([("user", p)]), parse_special=True)
        generated += [e.id for e in plain.stream_events(prompt, max_tokens=64, temp=0) if isinstance(e, TokenEvent)]
    plain.close()
    heads = {"full": Model.load(write_draft_head(source, out, "q8_0"))}
    heads.update({f"trimmed {n}": Model.load(dv.write_trimmed_head(source, ids[n], out, "q8_0")) for n in sizes})
    prompts = list(dv.PROMPTS[: args.smollm2_prompts])
    res = interleaved(model, heads, [3], prompts, args.tokens, args.reps, args.threads, flash_attn=True)
    full = statistics.median(s.timing_us.draft / max(1, s.drafts_generated) for s in res[("full", 3)])
    lines = [
        (f"SmolLM2-135M-Instruct Q4_1 ({source.name}), q8_0 head sidecars, fused driver, n_draft=3, flash attention, "
         f"{len(prompts)} prompts x {args.tokens} tokens, {args.reps} interleaved reps, threads={args.threads}; "
         f"token counts from the model's greedy answers to {len(dv.PROMPTS)} built-in prompts "
         f"({int(counts.sum())} tokens, {t_count:.1f} s); coverage: share of the target's greedy tokens on "
         f"{len(HELD_OUT)} held-out prompts ({len(generated)} tokens) inside the kept set:"),
        "",
        "| head | draft us per drafted token | x full | held-out coverage | acceptance (this head) | tokens/s |",
        "|---|---|---|---|---|---|",
    ]
    for (name, _), stats in res.items():
        t = statistics.median(s.timing_us.draft / max(1, s.drafts_generated) for s in stats)
        n = heads[name].draft_vocab_size
        cover = 1.0 if name == "full" else float(np.isin(generated, ids[n]).mean())
        lines.append(f"| {name} | {t:.0f} | {t / full:.2f} | {cover:.3f} | "
                     f"{statistics.median(s.acceptance_rate for s in stats):.3f} | "
                     f"{statistics.median(s.tokens_per_sec for s in stats):.1f} |")
    return lines


def synthetic_part(args: argparse.Namespace, out: Path) -> list[str]:
    start = time.perf_counter()
    fmt = args.format
    path = synthetic_model(args.size, 0.75, fmt, n_vocab=248_320, n_embd=1024)
    model = Model.load(path, load_mtp=False)
    prompts = SYNTHETIC_PROMPTS[: args.synthetic_prompts]
    n_drafts = [1, 2, 3, 4]
    counts = dv.token_frequencies(model, prompts=prompts, max_tokens=args.tokens + max(n_drafts),
                                  n_threads=args.threads)
    ids = dv.draft_vocab_ids(counts, args.n_large, dv.special_token_ids(path))
    heads = {
        "full": Model.load(write_draft_head(path, out, fmt)),
        f"trimmed {args.n_large}": Model.load(dv.write_trimmed_head(path, ids, out, fmt)),
    }
    setup = time.perf_counter() - start
    res = interleaved(model, heads, n_drafts, prompts, args.tokens, args.reps, args.threads)
    plain = MTP(model, n_draft=0, n_ctx=args.tokens + 256, n_threads=args.threads)
    plain_tps = []
    for _ in range(args.reps):
        plain.reset_stats()
        for p in prompts:
            plain.generate(p, max_tokens=args.tokens, temp=0)
        plain_tps.append(plain.stats().tokens_per_sec)
    lines = [
        (f"Synthetic hy_v3 ({path.name}): vocab 248,320, n_embd 1024, {fmt}, calibrated acceptance 0.75, "
         f"{fmt} head sidecars, {len(prompts)} prompts x {args.tokens} tokens, {args.reps} interleaved reps, "
         f"threads={args.threads} (setup {setup:.0f} s); plain decoding {statistics.median(plain_tps):.1f} tok/s:"),
        "",
        "| head | " + " | ".join(f"n_draft={k} tok/s (acc.)" for k in n_drafts) + " | best |",
        "|---|" + "---|" * (len(n_drafts) + 1),
    ]
    best: dict[str, tuple[float, int]] = {}
    for name in heads:
        cells = []
        for k in n_drafts:
            stats = res[(name, k)]
            tps = statistics.median(s.tokens_per_sec for s in stats)
            cells.append(f"{tps:.1f} ({statistics.median(s.acceptance_rate for s in stats):.2f})")
            best[name] = max(best.get(name, (0.0, 0)), (tps, k))
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {best[name][0]:.1f} (n_draft={best[name][1]}) |")
    names = list(heads)
    lines += ["", f"Best trimmed / best full: {best[names[1]][0] / best[names[0]][0]:.2f}x."]
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", default="both", choices=["smollm2", "synthetic", "both"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tokens", type=int, default=96)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--sizes", default="4096,8192,16384", help="trimmed sizes on SmolLM2")
    p.add_argument("--smollm2-prompts", type=int, default=4, help="built-in prompts timed on SmolLM2")
    p.add_argument("--n-large", type=int, default=32768, help="trimmed size on the synthetic model")
    p.add_argument("--format", default="q8_0", choices=["f16", "q8_0", "q4_0"],
                   help="synthetic model and head sidecars (q8_0: the small-batch kernel of patch 0001 verifies cheaply)")
    p.add_argument("--synthetic-prompts", type=int, default=4, help="prompts on the synthetic model")
    p.add_argument("--size", default="600M", help="synthetic model size (248,320 x 1024 embeddings + output: 508M)")
    p.add_argument("--smollm2-head", help="SmolLM2 GGUF with an embedded head (default: the -mtp-initial file)")
    p.add_argument("--out", default="benchmarks/results/draft_vocab")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    if args.part in ("smollm2", "both"):
        lines += smollm2_part(args, out) + [""]
    if args.part in ("synthetic", "both"):
        lines += synthetic_part(args, out)
    table = "\n".join(lines)
    print(table)
    (out / "draft_vocab.md").write_text(table + "\n")


if __name__ == "__main__":
    main()
