"""Decoding speed when other processes compete for the cores: quiet, then 1 and 2 busy processes
(each a pure-Python spin at normal priority), plain and MTP, at each thread count, with the
adaptive thread count (``adaptive_threads``, the default) and without it.

    .venv/bin/python benchmarks/contention.py [--model M] [--threads 1,2] [--busy 0,1,2] [--tokens 96] [--reps 2]

Every (busy, configuration) cell is the median tokens/s over ``--reps`` interleaved repetitions of
the prompts; the busy processes start before and stop after each busy level. Each configuration is a
session of its own that lives through the whole run (so what an adaptive session learnt at one busy
level it must unlearn at the next). Run it on an otherwise quiet machine and without ``chrt``
(real-time priority hides the contention it measures).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time



def busy_processes(n: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="GGUF with an MTP head (default: the built-in model)")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--busy", default="0,1,2")
    parser.add_argument("--modes", default="plain,auto", help="plain, auto or a fixed n_draft per entry")
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()

    from mtp_llm import MTP, Model
    from mtp_llm.bench.common import CHAT_QUESTIONS
    from mtp_llm.default_model import default_model_path

    model = Model.load(args.model or default_model_path())
    prompts = [model.apply_chat_template([("user", q)]) if model.chat_template else q for q in CHAT_QUESTIONS[:2]]
    sessions: dict[str, MTP] = {}
    for threads in (int(t) for t in args.threads.split(",")):
        for adaptive in ((True, False) if threads > 1 else (False,)):
            for mode in args.modes.split(","):
                n_draft: int | str = mode if mode == "auto" else 0 if mode == "plain" else int(mode)
                extra = {"draft_model": None} if n_draft == 0 else {}
                name = f"{mode}, {threads} thr" + (", adaptive" if adaptive else ", fixed" if threads > 1 else "")
                sessions[name] = MTP(model, n_draft=n_draft, n_threads=threads, adaptive_threads=adaptive, **extra)
    cells: dict[tuple[int, str], list[float]] = {}
    busy_levels = [int(b) for b in args.busy.split(",")]
    for busy in busy_levels:
        procs = busy_processes(busy)
        time.sleep(0.5)
        try:
            for rep in range(args.reps + 1):
                for prompt in prompts:
                    for name, session in sessions.items():
                        session.generate(prompt, max_tokens=args.tokens, temp=0)
                        if rep:
                            cells.setdefault((busy, name), []).append(session.last_stats.tokens_per_sec)
        finally:
            for p in procs:
                p.kill()
                p.wait()
    print(f"{os.cpu_count()} CPUs, {len(prompts)} prompts x {args.tokens} tokens, {args.reps} reps, median tokens/s\n")
    print("| configuration | " + " | ".join(f"{b} busy" for b in busy_levels) + " |")
    print("|---" * (len(busy_levels) + 1) + "|")
    for name in sessions:
        print(f"| {name} | " + " | ".join(f"{statistics.median(cells[(b, name)]):.1f}" for b in busy_levels) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
