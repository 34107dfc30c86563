"""Per-token sampling time under every template's tool-call grammar (forced calls).

Usage: python benchmarks/grammar_cost.py [--tool weather|awkward] [--out DIR]
       python benchmarks/grammar_cost.py --built-in [--reps 2]

For each chat template of the pinned llama.cpp tree, a tiny random-weight model carrying it
generates a forced call of the tool (greedy, n_draft 3, 1 thread) and the table reports the
sampling time per emitted token (the grammar is applied while sampling), the whole call's time
and what was generated. ``awkward`` is a tool with a dotted name, a key with a space and a
``$ref``, the shape that once made command-r7b's grammar take seconds per token.

``--built-in``: the same measure on the built-in model's 49,152-token vocabulary, plain decoding of the
structured benchmark's workloads (forced tool calls and JSON-schema answers, ``benchmarks/structured_speed.py``),
1 thread; the last of ``--reps`` repetitions counts (the first warms the session up).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from mtp_llm import MTP, MTPError
from mtp_llm.chat import chat_format
from mtp_llm.options import GenerationOptions

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.helpers.templates import TEMPLATES, write_template_models  # noqa: E402

TOOLS = {
    "weather": {"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "London"]},
                                         "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "days"]}}},
    "awkward": {"type": "function", "function": {"name": "weather.get_forecast", "description": "Forecast", "parameters": {
        "type": "object", "$defs": {"Unit": {"enum": ["celsius", "fahrenheit"]}},
        "properties": {"city name": {"type": "string"}, "unit": {"$ref": "#/$defs/Unit"}},
        "required": ["city name", "unit"]}}},
}


def built_in(reps: int) -> None:
    """Sampling time per token on the built-in model under the structured workloads' grammars."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from structured_speed import workloads

    from mtp_llm import Model
    from mtp_llm.default_model import default_model_path

    model = Model.load(default_model_path())
    session = MTP(model, draft_model=None, n_draft=0, n_threads=1)
    for load, items in workloads(model, 128).items():
        sample_us = tokens = 0
        for _ in range(reps):
            sample_us = tokens = 0
            for prompt, options in items:
                session.generate(prompt, options=options)
                st = session.last_stats
                assert st is not None
                sample_us += st.timing_us.sample
                tokens += st.tokens_emitted
        print(f"{load:12s} {sample_us / 1000 / tokens:.3f} ms of sampling a token ({tokens} tokens)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tool", choices=sorted(TOOLS), default="awkward")
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/grammar_cost"))
    parser.add_argument("--built-in", action="store_true", help="the built-in model's structured workloads instead")
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    if args.built_in:
        built_in(args.reps)
        return
    models = write_template_models(Path("tests/.models/templates"))
    rows = []
    for name in TEMPLATES:
        from mtp_llm import Model

        model = Model.load(models[name])
        fmt = chat_format(model)
        try:
            turn = fmt.turn([{"role": "user", "content": "Weather in Paris?"}], tools=[TOOLS[args.tool]],
                            tool_choice="required", enable_thinking=False)
        except MTPError as exc:  # the template cannot render this tool: a clear error, nothing to time
            print(f"{name:48s} {type(exc).__name__}", flush=True)
            rows.append({"template": name, "error": type(exc).__name__})
            continue
        session = MTP(model, n_draft=3, n_ctx=8192, n_threads=1)
        start = time.perf_counter()
        session.generate(turn.prompt, options=turn.options(GenerationOptions(temp=0, max_tokens=args.max_tokens,
                                                                              reasoning_budget=0)))
        seconds = time.perf_counter() - start
        st = session.last_stats
        assert st is not None
        rows.append({"template": name, "tokens": st.tokens_emitted,
                     "sample_ms_per_token": st.timing_us.sample / 1000 / max(1, st.tokens_emitted),
                     "call_s": seconds, "prompt_tokens": st.prompt_tokens})
        print(f"{name:48s} {rows[-1]['sample_ms_per_token']:8.3f} ms/token  {seconds:6.2f} s", flush=True)
    timed = [r for r in rows if "error" not in r]
    worst = max(timed, key=lambda r: r["sample_ms_per_token"])
    lines = [f"tool `{args.tool}`, {len(rows)} templates, forced call, up to {args.max_tokens} tokens, n_draft 3, 1 thread",
             f"median sampling {statistics.median(r['sample_ms_per_token'] for r in timed):.3f} ms/token, "
             f"worst {worst['sample_ms_per_token']:.3f} ms/token ({worst['template']}); "
             f"{len(rows) - len(timed)} templates cannot render the tool (a clear MTPError)", "",
             "| template | tokens | sampling ms/token | call s (prompt included) |", "| --- | ---: | ---: | ---: |"]
    lines += [f"| {r['template']} | {r['tokens']} | {r['sample_ms_per_token']:.3f} | {r['call_s']:.2f} |"
              if "error" not in r else f"| {r['template']} | - | {r['error']} | - |" for r in rows]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.tool}.md").write_text("\n".join(lines) + "\n")
    (args.out / f"{args.tool}.json").write_text(json.dumps(rows, indent=2) + "\n")
    print("\n".join(lines[:2]))


if __name__ == "__main__":
    main()
