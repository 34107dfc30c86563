"""Plain decoding against MTP (n_draft 1, 2 and "auto") on the built-in model, interleaved per prompt;
``--head`` adds the same configurations with another head file for SmolLM2 (e.g. a full-vocabulary or
a newly trained head, embedded by ``mtp_llm.smollm2.converted_path``).

    chrt -f 50 .venv/bin/python benchmarks/built_in_speed.py [--head HEAD.gguf] [--threads 2] [--reps 3]

Four chat prompts the head never saw, 128 tokens, greedy; one warm-up repetition not counted; medians.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from mtp_llm import MTP, Model
from mtp_llm.bench.common import CHAT_QUESTIONS
from mtp_llm.default_model import default_model_path



def sessions_for(label: str, model: Model, threads: int) -> dict[str, MTP]:
    """The MTP configurations compared on one model file."""
    return {
        f"{label}n_draft 1": MTP(model, n_draft=1, n_threads=threads),
        f"{label}n_draft 2": MTP(model, n_draft=2, n_threads=threads),
        f"{label}auto": MTP(model, n_draft="auto", n_threads=threads),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--head", type=Path, default=None, help="another SmolLM2 MTP head file to compare")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()
    model = Model.load(default_model_path())
    prompts = [model.apply_chat_template([("user", q)]) for q in CHAT_QUESTIONS]
    sessions = {"plain": MTP(model, draft_model=None, n_draft=0, n_threads=args.threads)}
    sessions |= sessions_for(f"built-in (vocab {model.draft_vocab_size}), ", model, args.threads)
    if args.head is not None:
        from mtp_llm.smollm2 import converted_path

        other = Model.load(converted_path(args.head))
        sessions |= sessions_for(f"{args.head.name} (vocab {other.draft_vocab_size}), ", other, args.threads)
    speed: dict[str, list[float]] = {k: [] for k in sessions}
    acceptance: dict[str, list[float]] = {k: [] for k in sessions}
    lengths: dict[str, list[int]] = {k: [] for k in sessions}
    for rep in range(args.reps + 1):
        for prompt in prompts:
            for name, session in sessions.items():
                session.generate(prompt, max_tokens=args.tokens, temp=0)
                if rep > 0:
                    st = session.last_stats
                    speed[name].append(st.tokens_per_sec)
                    acceptance[name].append(st.acceptance_rate)
                    counts = list(st.draft_length_counts)
                    lengths[name] = [a + b for a, b in zip(lengths[name] or [0] * len(counts), counts)]
    base = statistics.median(speed["plain"])
    print(f"{args.threads} threads, {len(prompts)} prompts x {args.tokens} tokens, {args.reps} reps\n")
    print("| configuration | tokens/s | x plain | acceptance | iterations per drafted length |\n|---|---|---|---|---|")
    for name in sessions:
        tps = statistics.median(speed[name])
        print(f"| {name} | {tps:.1f} | {tps / base:.3f} | {statistics.mean(acceptance[name]):.3f} | "
              f"{'/'.join(map(str, lengths[name]))} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
