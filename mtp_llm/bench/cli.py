"""``mtp-llm bench``: its flags and the command (a table, ``--parallel`` streams or ``--costs``)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from ..options import ROLLBACK_MODES
from .common import DEFAULT_PROMPTS, SYNTHETIC_PROMPTS, draft_lengths, load_prompts, resolve_model
from .single import cmd_costs, markdown_table, plot, run_bench, run_wrappers, to_rows

def cmd_bench(args: argparse.Namespace) -> int:
    model_path = resolve_model(args)
    if args.costs:
        return cmd_costs(args, model_path)
    if args.prompts:
        prompts = load_prompts(args.prompts)
    else:
        prompts = SYNTHETIC_PROMPTS[:8] if args.synthetic else DEFAULT_PROMPTS
    if args.parallel:
        from .parallel import cmd_parallel

        return cmd_parallel(args, model_path, prompts)
    n_drafts = draft_lengths(args.n_draft)
    results, meta = run_bench(
        model_path, n_drafts, prompts, args.tokens, args.threads, args.reps, args.warmup, not args.no_progress,
        args.rollback, {"default": None, "on": True, "off": False}[args.flash_attn], args.draft_head,
        args.n_gpu_layers, args.temp, args.seed,
    )
    rows = to_rows(results)
    table = markdown_table(rows)
    print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    (out / "bench.md").write_text(table + "\n")
    title = (
        f"{Path(meta['model']).name}, {meta['tokens']} tokens, threads={meta['threads']}, "
        f"flash_attn={meta['flash_attn']}"
    )
    png = plot(rows, out / "bench.png", title)
    print(f"\nwrote {out / 'bench.json'}, {out / 'bench.md'}" + (f", {png}" if png else ""))
    if args.wrappers:
        k = max((k for k in n_drafts if k != "auto"), default=3)
        wrapper_rows = run_wrappers(model_path, k, prompts, args.tokens, args.threads, args.reps)
        lines = ["| path | tokens/s (median, end to end) | ratio to raw (same prompt) |", "|---|---|---|"]
        lines += [f"| {r['path']} | {r['tokens_per_sec_median']:.1f} | {r['ratio_to_raw']:.3f} |" for r in wrapper_rows]
        wrappers_md = "\n".join(lines)
        print("\n" + wrappers_md)
        (out / "wrappers.md").write_text(wrappers_md + "\n")
        (out / "wrappers.json").write_text(json.dumps(wrapper_rows, indent=2))
    return 0



def add_bench_parser(sub: Any) -> None:
    p = sub.add_parser("bench", help="benchmark MTP against plain decoding (interleaved runs)")
    p.add_argument("--model", type=os.path.expanduser, help="GGUF with an MTP head (default: the built-in model)")
    p.add_argument("--n-draft", default="1,2,3,4",
                   help="comma-separated draft lengths, 'auto' among them if wanted (default 1,2,3,4; e.g. 1,2,auto)")
    p.add_argument("--prompts", type=os.path.expanduser, help="prompts: a text file (one per line) or a JSON list "
                   "(default: 4 verse openings; 8 prompts with distinct last tokens for --synthetic)")
    p.add_argument("--tokens", type=int, default=128, help="tokens generated per prompt")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--reps", type=int, default=3, help="measured repetitions")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--temp", type=float, default=0.0,
                   help="sampling temperature (0: greedy); above 0 MTP drafts are sampled and verified by rejection")
    p.add_argument("--seed", type=int, default=None, help="seed of the first prompt (the next ones: +1 each)")
    p.add_argument("--out", type=os.path.expanduser, default="benchmarks/results", help="output directory")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--rollback", default="auto", choices=ROLLBACK_MODES,
                   help="hybrid targets: recurrent-state rollback or checkpoint save/restore")
    p.add_argument("--flash-attn", default="default", choices=["default", "on", "off"],
                   help="flash attention (default: the engine's choice)")
    p.add_argument("--draft-head", choices=["f16", "q8_0", "q4_0"],
                   help="MTP rows draft with the model's head written as a sidecar of this type (mtp-llm draft-head)")
    p.add_argument("--n-gpu-layers", type=int, default=0,
                   help="layers offloaded to the GPU (-1: all; needs a GPU build, see docs/gpu.md)")
    p.add_argument("--wrappers", action="store_true", help="also measure the LangChain/LlamaIndex streaming paths")
    p.add_argument("--parallel", metavar="N,N,...",
                   help="instead of the table: aggregate tokens/s of N concurrent streams on one session "
                   "(n_parallel slots), plain and at each --n-draft (which may include 'auto'), e.g. 1,2,4")
    syn = p.add_argument_group("synthetic model (instead of --model; see mtp_llm.gguf.synthetic)")
    syn.add_argument("--synthetic", metavar="SIZE",
                     help="a synthetic hy_v3 model of SIZE target parameters (e.g. 150M, 1.5B), written and cached")
    syn.add_argument("--acceptance", type=float, default=None,
                     help="probability that each draft position is accepted (default: every draft)")
    syn.add_argument("--format", default="f16", choices=["f32", "f16", "q8_0", "q4_0"], help="weight format")
    syn.add_argument("--vocab", type=int, default=None, help="vocabulary size (default 32000 from 20M parameters)")
    syn.add_argument("--n-embd", type=int, default=None,
                     help="hidden size (default: from SIZE), e.g. --vocab 248320 --n-embd 1024 for Qwen3.5-0.8B's LM head")
    cost = p.add_argument_group("cost curve (--costs)")
    cost.add_argument("--costs", action="store_true",
                      help="time the passes of one draft/verify iteration and print where MTP pays, instead of the table")
    cost.add_argument("--fill", type=int, default=128, help="tokens of context the timed passes attend over")
    cost.add_argument("--cost-reps", type=int, default=20, help="repetitions of every timed pass")
    cost.add_argument("--draft-vocab", type=int, metavar="N",
                      help="also time the head trimmed to N tokens (docs/draft-vocab.md) beside the full head, "
                      "both written as sidecars of --draft-head's type (default q8_0)")
    p.set_defaults(func=cmd_bench)
