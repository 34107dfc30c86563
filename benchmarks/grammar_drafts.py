"""Grammar-forced drafts under a JSON schema: plain decoding, MTP with the head alone, and MTP
with grammar-forced drafts (``grammar_drafts``), all under the same grammar, interleaved.

Usage: python benchmarks/grammar_drafts.py [MODEL.gguf|random] [--threads N] [--reps R] [--out DIR]

Each repetition runs every configuration once over the same prompts (greedy, compact JSON
schema output of a weather tool call: enums, an integer, a boolean, a nested array), and
the table reports the median tokens/s, the ratio to plain decoding, tokens committed per
verify pass and the forced drafts' acceptance. Outputs are checked equal to plain decoding's.
Results go to DIR/grammar_drafts.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from mtp_llm import MTP, Model
from mtp_llm.bench.common import cpu_name
from mtp_llm.chat import json_schema_grammar

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"enum": ["Paris", "London", "Tokyo", "Buenos Aires"]},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "alerts": {"type": "boolean"},
        "fields": {
            "type": "array",
            "items": {"enum": ["temperature", "humidity", "wind_speed", "precipitation"]},
            "minItems": 1,
            "maxItems": 3,
        },
    },
    "required": ["city", "unit", "days", "alerts", "fields"],
    "additionalProperties": False,
}
PROMPTS = ["Weather for the trip:", "Hello", "Forecast request", "The quick brown fox jumps over the lazy dog."]
CONFIGS = {
    "plain": {"n_draft": 0},
    "head only": {"n_draft": 4, "grammar_drafts": False},
    "grammar + head": {"n_draft": 4, "grammar_drafts": True},
    "default (auto, grammar)": {},
    "auto, head only": {"grammar_drafts": False},
}



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="random", help="a GGUF with an MTP head, or 'random' (tiny test model)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=192)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()

    if args.model == "random":
        from mtp_llm.gguf.tiny_models import make_tiny_models

        path = make_tiny_models(Path(tempfile.gettempdir()) / "mtp_llm_tiny")["random"]
    else:
        path = Path(args.model)
    model = Model.load(path)
    grammar = json_schema_grammar(SCHEMA)
    sessions = {name: MTP(model, n_ctx=2048, n_threads=args.threads, **opts) for name, opts in CONFIGS.items()}
    speeds: dict[str, list[float]] = {name: [] for name in CONFIGS}
    outputs: dict[str, list[str]] = {}
    for rep in range(args.reps + 1):  # the first repetition warms up
        for name, session in sessions.items():
            session.reset_stats()
            texts = [session.generate(p, max_tokens=args.max_tokens, temp=0, grammar=grammar) for p in PROMPTS]
            outputs.setdefault(name, texts)
            if rep:
                speeds[name].append(session.stats().tokens_per_sec)
    for name in CONFIGS:
        assert outputs[name] == outputs["plain"], f"{name} differs from plain decoding"
        for text in outputs[name]:
            json.loads(text)

    base = statistics.median(speeds["plain"])
    rows = []
    for name, session in sessions.items():
        st = session.stats()
        rows.append({
            "config": name,
            "tokens_per_sec": statistics.median(speeds[name]),
            "ratio_to_plain": statistics.median(speeds[name]) / base,
            "tokens_per_verify_pass": st.tokens_emitted / st.iters if st.iters else 0.0,
            "drafts_forced": st.drafts_forced,
            "forced_acceptance": st.drafts_forced_accepted / st.drafts_forced if st.drafts_forced else 0.0,
            "head_acceptance": st.head_acceptance_rate,
        })
    header = (f"Model {path.name}, {args.threads} thread(s), {len(PROMPTS)} prompts x {args.max_tokens} tokens max, "
              f"median of {args.reps} interleaved repetitions; CPU: {cpu_name()}")
    lines = [header, "", "| config | t/s | x plain | tokens / verify pass | forced drafts | forced accepted | head accepted |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['config']} | {r['tokens_per_sec']:.1f} | {r['ratio_to_plain']:.2f} | "
                     f"{r['tokens_per_verify_pass']:.2f} | {r['drafts_forced']} | {r['forced_acceptance']:.2f} | "
                     f"{r['head_acceptance']:.2f} |")
    lines += ["", "Output (identical in every configuration): `" + outputs["plain"][0] + "`"]
    text = "\n".join(lines)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "grammar_drafts.md").write_text(text + "\n")
    (args.out / "grammar_drafts.json").write_text(json.dumps({"header": header, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
