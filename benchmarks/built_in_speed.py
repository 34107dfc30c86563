"""Plain decoding against MTP (n_draft 1, 2 and "auto") on the built-in model, interleaved per prompt;
``--head`` adds the same configurations with another head file for SmolLM2 (e.g. a full-vocabulary or
a newly trained head, embedded by ``mtp_llm.smollm2.converted_path``).

    .venv/bin/python benchmarks/built_in_speed.py [--head HEAD.gguf] [--threads 2] [--reps 3] [--out DIR]

Four chat prompts the head never saw, 128 tokens, greedy; one warm-up repetition not counted; medians.
The table is printed and written to DIR/built_in_speed.{md,json} (default benchmarks/results), which
``benchmarks/plots.py`` draws.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from mtp_llm import MTP, Model
from mtp_llm.bench.common import CHAT_QUESTIONS, cpu_name
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
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
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
    header = (f"Built-in model ({Path(default_model_path()).name}), {len(prompts)} chat prompts x {args.tokens} "
              f"tokens, greedy, {args.threads} threads, median of {args.reps} interleaved repetitions; "
              f"CPU: {cpu_name()}")
    lines = [header, "", "| configuration | tokens/s | x plain | acceptance | iterations per drafted length |",
             "|---|---|---|---|---|"]
    rows = []
    for name in sessions:
        tps = statistics.median(speed[name])
        rows.append({"config": name.replace(f"built-in (vocab {model.draft_vocab_size}), ", ""), "tokens_per_sec": tps,
                     "x_plain": tps / base, "acceptance": statistics.mean(acceptance[name]),
                     "draft_length_counts": lengths[name]})
        lines.append(f"| {name} | {tps:.1f} | {tps / base:.3f} | {statistics.mean(acceptance[name]):.3f} | "
                     f"{'/'.join(map(str, lengths[name]))} |")
    print("\n".join(lines))
    meta = {"command": "benchmarks/built_in_speed.py " + " ".join(sys.argv[1:]), "cpu": cpu_name(),
            "threads": args.threads, "reps": args.reps, "tokens": args.tokens, "prompts": len(prompts),
            "model": Path(default_model_path()).name}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "built_in_speed.md").write_text("\n".join(lines) + "\n")
    (args.out / "built_in_speed.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
