"""Sampled generation on the built-in model: plain decoding against MTP (n_draft 1 and "auto") at temperature 0,
0.8 and 1.0, with the head's drafts sampled and verified by rejection (exact speculative sampling, the default)
and with its argmax drafts (``draft_temp=0``), interleaved per prompt.

    .venv/bin/python benchmarks/sampled_speed.py [--temps 0,0.8,1.0] [--threads 2] [--reps 3] [--out DIR]

Four chat prompts x 128 tokens, llama.cpp's default truncation (top-k 40, top-p 0.95, min-p 0.05), one seed per
prompt and repetition (the same for every configuration); one warm-up repetition not counted; medians of tokens/s,
acceptance over all calls. Writes DIR/sampled_speed.{md,json} (default benchmarks/results).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from mtp_llm import MTP, Model
from mtp_llm.bench.common import CHAT_QUESTIONS, cpu_name

CONFIGS = {
    "plain": ({"n_draft": 0}, {}),
    "n_draft 1, argmax drafts": ({"n_draft": 1}, {"draft_temp": 0.0}),
    "n_draft 1, sampled drafts": ({"n_draft": 1}, {}),
    "auto, argmax drafts": ({"n_draft": "auto"}, {"draft_temp": 0.0}),
    "auto, sampled drafts": ({"n_draft": "auto"}, {}),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--temps", default="0,0.8,1.0")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args()
    temps = [float(t) for t in args.temps.split(",")]
    model = Model.load_default()
    prompts = [model.apply_chat_template([("user", q)]) for q in CHAT_QUESTIONS]
    sessions = {name: MTP(model, n_threads=args.threads, **session) for name, (session, _) in CONFIGS.items()}
    speed = {(t, name): [] for t in temps for name in CONFIGS}  # type: dict[tuple[float, str], list[float]]
    counted = {(t, name): [0, 0] for t in temps for name in CONFIGS}
    for rep in range(args.reps + 1):
        for k, prompt in enumerate(prompts):
            for temp in temps:
                for name, (_, call) in CONFIGS.items():
                    session = sessions[name]
                    session.generate(prompt, max_tokens=args.tokens, temp=temp, seed=1000 * rep + k, **call)
                    if rep > 0:
                        st = session.last_stats
                        speed[(temp, name)].append(st.tokens_per_sec)
                        counted[(temp, name)][0] += st.drafts_accepted
                        counted[(temp, name)][1] += st.drafts_generated
    header = (f"Built-in model, {len(prompts)} chat prompts x {args.tokens} tokens, {args.threads} threads, median of "
              f"{args.reps} interleaved repetitions; CPU: {cpu_name()}; `.venv/bin/python benchmarks/sampled_speed.py "
              f"{' '.join(sys.argv[1:])}`".replace(" `", "`"))
    lines = [header, "", "| temperature | configuration | tokens/s | x plain | acceptance |", "|---|---|---|---|---|"]
    rows = []
    for temp in temps:
        base = statistics.median(speed[(temp, "plain")])
        for name in CONFIGS:
            tps = statistics.median(speed[(temp, name)])
            accepted, drafted = counted[(temp, name)]
            acceptance = accepted / drafted if drafted else 0.0
            rows.append({"temp": temp, "config": name, "tokens_per_sec": tps, "x_plain": tps / base,
                         "acceptance": acceptance})
            shown = f"{acceptance:.3f}" if name != "plain" else "-"
            lines.append(f"| {temp} | {name} | {tps:.1f} | {tps / base:.3f} | {shown} |")
    print("\n".join(lines))
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"command": "benchmarks/sampled_speed.py " + " ".join(sys.argv[1:]), "cpu": cpu_name(),
            "threads": args.threads, "reps": args.reps, "tokens": args.tokens}
    (args.out / "sampled_speed.md").write_text("\n".join(lines) + "\n")
    (args.out / "sampled_speed.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
