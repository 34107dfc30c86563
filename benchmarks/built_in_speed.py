"""Plain decoding against MTP (n_draft 1 and "auto") on the built-in model, with its shipped head and
with a trimmed-vocabulary head, interleaved per prompt.

    .venv/bin/mtp-llm draft-head MODEL --draft-vocab 8192 --corpus ANSWERS.txt --out trimmed.gguf
    chrt -f 50 .venv/bin/python benchmarks/built_in_speed.py --trimmed trimmed.gguf [--threads 2] [--reps 3]

MODEL is ``mtp_llm.smollm2.built_in_path()``; ANSWERS.txt the training answers' text (docs/smollm2.md).
Four chat prompts the head never saw, 128 tokens, greedy; one warm-up repetition not counted; medians.
"""

from __future__ import annotations

import argparse
import statistics

from mtp_llm import MTP, Model
from mtp_llm.default_model import default_model_path

QUESTIONS = ["Why is the sky blue?", "Explain how a rainbow forms.", "What are the benefits of reading books?",
             "Describe how bread is made."]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trimmed", required=True, help="a trimmed MTP head sidecar of the built-in model")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()
    model = Model.load(default_model_path())
    trimmed = Model.load(args.trimmed)
    prompts = [model.apply_chat_template([("user", q)]) for q in QUESTIONS]
    sessions = {
        "plain": MTP(model, draft_model=None, n_draft=0, n_threads=args.threads),
        "n_draft 1": MTP(model, n_draft=1, n_threads=args.threads),
        "auto": MTP(model, n_draft="auto", n_threads=args.threads),
        "n_draft 1, trimmed": MTP(model, draft_model=trimmed, n_draft=1, n_threads=args.threads),
        "auto, trimmed": MTP(model, draft_model=trimmed, n_draft="auto", n_threads=args.threads),
    }
    speed: dict[str, list[float]] = {k: [] for k in sessions}
    acceptance: dict[str, list[float]] = {k: [] for k in sessions}
    for rep in range(args.reps + 1):
        for prompt in prompts:
            for name, session in sessions.items():
                session.generate(prompt, max_tokens=args.tokens, temp=0)
                if rep > 0:
                    speed[name].append(session.last_stats.tokens_per_sec)
                    acceptance[name].append(session.last_stats.acceptance_rate)
    base = statistics.median(speed["plain"])
    print("| configuration | tokens/s | x plain | acceptance |\n|---|---|---|---|")
    for name in sessions:
        tps = statistics.median(speed[name])
        print(f"| {name} | {tps:.1f} | {tps / base:.3f} | {statistics.mean(acceptance[name]):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
