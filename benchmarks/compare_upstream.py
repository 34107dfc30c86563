"""Our engine against llama.cpp's own MTP loop (llama-speculative-simple), same GGUF and settings.

Build the upstream binaries first: ``bash benchmarks/build_upstream.sh``. Then:

    python benchmarks/compare_upstream.py [--model PATH] [--n-draft 3] [--tokens 128] [--threads 2] [--reps 3]

Runs are interleaved (upstream, ours, upstream, ours, ...) on the same prompt;
the report gives median decode tokens/s, the ratio ours/upstream (goal >= 0.97)
and both acceptance rates (greedy: should be identical). Upstream's counters
count replays as accepted drafts; on dense models there are none.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "ROMEO: But soft, what light through yonder window breaks?"


def run_upstream(
    binary: Path, model: str, n_draft: int, tokens: int, threads: int, prompt: str, flash_attn: str
) -> dict[str, float]:
    cmd = [
        str(binary), "-m", model, "-p", prompt, "-n", str(tokens), "--spec-type", "draft-mtp",
        "--spec-draft-n-max", str(n_draft), "--temp", "0", "--top-k", "1", "-t", str(threads),
        "-tb", str(threads), "-c", "2048", "--seed", "42", "-fa", flash_attn,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    log = proc.stdout + proc.stderr
    decoded = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s", log)
    accept = re.search(r"accept\s+=\s+([\d.]+)%", log)
    n_drafted = re.search(r"n_drafted\s+=\s+(\d+)", log)
    n_accept = re.search(r"n_accept\s+=\s+(\d+)", log)
    if not decoded:
        raise RuntimeError(f"could not parse upstream output (rc={proc.returncode}):\n{log[-3000:]}")
    return {
        "tokens": int(decoded.group(1)),
        "tokens_per_sec": float(decoded.group(3)),
        "acceptance_rate": float(accept.group(1)) / 100 if accept else float("nan"),
        "drafts_generated": int(n_drafted.group(1)) if n_drafted else -1,
        "drafts_accepted": int(n_accept.group(1)) if n_accept else -1,
    }


def run_ours(session, tokens: int, prompt: str) -> dict[str, float]:  # noqa: ANN001
    session.reset_stats()
    session.generate(prompt, max_tokens=tokens, temp=0)
    s = session.stats()
    return {
        "tokens": s.tokens_emitted,
        "tokens_per_sec": s.tokens_per_sec,
        "acceptance_rate": s.acceptance_rate,
        "drafts_generated": s.drafts_generated,
        "drafts_accepted": s.drafts_accepted,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model")
    parser.add_argument("--n-draft", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--flash-attn", default="off", choices=["on", "off"],
                        help="the same setting on both sides (off: the engine's default on the CPU)")
    parser.add_argument("--bin-dir", default=str(ROOT / "build" / "upstream" / "bin"))
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args()

    from mtp_llm import MTP, Model
    from mtp_llm.default_model import default_model_path

    model_path = args.model or str(default_model_path())
    binary = Path(args.bin_dir) / "llama-speculative-simple"
    if not binary.exists():
        print(f"{binary} not found: run `bash benchmarks/build_upstream.sh` first", file=sys.stderr)
        return 2
    session = MTP(
        Model.load(model_path), n_draft=args.n_draft, n_ctx=2048, n_threads=args.threads,
        flash_attn=args.flash_attn == "on",
    )
    run_ours(session, 16, PROMPT)  # warm-up
    run_upstream(binary, model_path, args.n_draft, 16, args.threads, PROMPT, args.flash_attn)
    upstream, ours = [], []
    for _ in range(args.reps):
        upstream.append(run_upstream(binary, model_path, args.n_draft, args.tokens, args.threads, PROMPT, args.flash_attn))
        ours.append(run_ours(session, args.tokens, PROMPT))
    up_tps = statistics.median(r["tokens_per_sec"] for r in upstream)
    our_tps = statistics.median(r["tokens_per_sec"] for r in ours)
    report = {
        "model": model_path,
        "n_draft": args.n_draft,
        "tokens": args.tokens,
        "threads": args.threads,
        "flash_attn": args.flash_attn,
        "upstream": upstream,
        "ours": ours,
        "upstream_tps_median": up_tps,
        "ours_tps_median": our_tps,
        "ratio": our_tps / up_tps,
    }
    table = (
        "| engine | decode t/s (median) | acceptance | drafts accepted/generated |\n|---|---|---|---|\n"
        f"| llama-speculative-simple | {up_tps:.1f} | {upstream[-1]['acceptance_rate']:.3f} | "
        f"{upstream[-1]['drafts_accepted']}/{upstream[-1]['drafts_generated']} |\n"
        f"| mtp_llm | {our_tps:.1f} | {ours[-1]['acceptance_rate']:.3f} | "
        f"{ours[-1]['drafts_accepted']}/{ours[-1]['drafts_generated']} |\n\n"
        f"ratio ours/upstream: {our_tps / up_tps:.3f}\n"
    )
    print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "upstream.json").write_text(json.dumps(report, indent=2))
    (out / "upstream.md").write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
