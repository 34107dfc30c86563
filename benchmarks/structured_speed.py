"""Grammar-aware drafting on the built-in model: tool calls, JSON-schema answers and free text.

    chrt -f 50 .venv/bin/python benchmarks/structured_speed.py [--threads 2] [--reps 3] [--out DIR]

Three configurations, interleaved per prompt, all greedy and under the same grammar: plain decoding,
MTP without grammar-aware drafting (``grammar_drafts=False``: the head drafts alone) and the default
(``n_draft="auto"``, grammar-aware drafting on). Workloads: forced tool calls through the chat layer
(``ChatFormat.turn(..., tool_choice="required")``), answers constrained by a JSON schema
(``json_schema_grammar``), and free chat text (no grammar: grammar-aware drafting must change nothing).
Every repetition starts fresh sessions for each workload (what a session learns of the model's
spelling of forced text starts from nothing each time) and runs 8 calls on each (4 free chat answers); one warm-up
repetition is not counted. A repetition's speed is its tokens over its decode time, all calls together (per-call
figures of 30-60 tokens were too noisy); the table gives the median over repetitions and their min-max. Outputs
must equal plain decoding's. Results go to DIR/structured_speed.{md,json}.

With ``--temp T`` (> 0) every call samples (seed = its index) and the MTP configurations are the head's
argmax drafts verified by comparison (``draft_temp=0``, the default under a grammar: outputs still equal
plain decoding's, seed for seed) and drafts sampled from the head (``draft_temp=T``, the default without a
grammar) verified by rejection (the same distribution, other draws). Results go to
DIR/structured_speed_tT.{md,json}.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from pathlib import Path
from typing import Any

from mtp_llm import MTP, Model
from mtp_llm.bench.common import CHAT_QUESTIONS, EXAMPLE_TOOLS, cpu_name
from mtp_llm.chat import chat_format, json_schema_grammar
from mtp_llm.default_model import default_model_path
from mtp_llm.options import GenerationOptions

TOOL_QUESTIONS = [
    "What's the weather in Paris for the next 3 days, in celsius?",
    "Find me up to 5 books about gardening that are available now.",
    "How many yen is 250 US dollars?",
    "Will it rain in London this week? Use fahrenheit.",
    "Search for two books on the history of Rome.",
    "Convert 80 euros to British pounds, please.",
    "What will the weather be like in Tokyo tomorrow?",
    "I need ten science fiction books, including ones that are not available.",
]
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 32},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "occupation": {"type": "string", "maxLength": 32},
        "skills": {"type": "array", "items": {"type": "string", "maxLength": 24}, "minItems": 1, "maxItems": 3},
        "employed": {"type": "boolean"},
    },
    "required": ["name", "age", "occupation", "skills", "employed"],
    "additionalProperties": False,
}
JSON_QUESTIONS = [
    "Describe a fictional software engineer as JSON.",
    "Make up a chef character and give their profile as JSON.",
    "Give the profile of a retired teacher as JSON.",
    "Create a JSON profile for a young musician.",
    "Invent a doctor who works in a small town and describe them as JSON.",
    "Give me a JSON profile of a farmer.",
    "Describe an unemployed painter as JSON.",
    "Make up a pilot and return their profile as JSON.",
]
GREEDY_CONFIGS: dict[str, dict[str, Any]] = {
    "plain": {"draft_model": None, "n_draft": 0},
    "MTP, head only": {"grammar_drafts": False},
    "MTP, grammar-aware (default)": {},
}
# Session options, then per-call options.
SAMPLED_CONFIGS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "plain": ({"draft_model": None, "n_draft": 0}, {}),
    "MTP, argmax drafts": ({}, {"draft_temp": 0.0}),  # the default under a grammar
    "MTP, sampled drafts": ({}, {"draft_temp": None}),  # draft_temp = temp, set below; the default without one
}



def workloads(model: Model, max_tokens: int, temp: float) -> dict[str, list[tuple[str, GenerationOptions]]]:
    """(prompt, options) per workload."""
    base = GenerationOptions(max_tokens=max_tokens, temp=temp)
    chat = chat_format(model)
    tool_calls = []
    for question in TOOL_QUESTIONS:
        turn = chat.turn([{"role": "user", "content": question}], tools=EXAMPLE_TOOLS, tool_choice="required")
        tool_calls.append((turn.prompt, turn.options(base)))
    schema = dataclasses.replace(base, grammar=json_schema_grammar(PERSON))
    answers = [(model.apply_chat_template([("user", q)]), schema) for q in JSON_QUESTIONS]
    free = [(model.apply_chat_template([("user", q)]), base) for q in CHAT_QUESTIONS]
    return {"tool calls": tool_calls, "JSON schema": answers, "free text": free}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--temp", type=float, default=0.0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    model = Model.load(default_model_path())
    loads = workloads(model, args.max_tokens, args.temp)
    if args.temp > 0:
        configs = SAMPLED_CONFIGS
        second, stem = "MTP, argmax drafts", f"structured_speed_t{args.temp:g}"
    else:
        configs = {name: (opts, {}) for name, opts in GREEDY_CONFIGS.items()}
        second, stem = "MTP, head only", "structured_speed"
    speed: dict[tuple[str, str], list[float]] = {}
    totals: dict[tuple[str, str], dict[str, float]] = {}
    outputs: dict[tuple[str, str], list[str]] = {}
    for rep in range(args.reps + 1):
        for load, items in loads.items():
            # Fresh sessions per workload: what the automatic length learns under one workload's
            # grammar is not carried into the next.
            sessions = {name: MTP(model, n_threads=args.threads, **opts) for name, (opts, _) in configs.items()}
            rep_tokens = dict.fromkeys(configs, 0)
            rep_us = dict.fromkeys(configs, 0)
            for seed, (prompt, options) in enumerate(items):
                for name, session in sessions.items():
                    extra = {k: (args.temp if v is None else v) for k, v in configs[name][1].items()}
                    call = dataclasses.replace(options, seed=seed, **extra)
                    text = session.generate(prompt, options=call)
                    key = (load, name)
                    if rep == 0:
                        outputs.setdefault(key, []).append(text)
                        continue
                    st = session.last_stats
                    rep_tokens[name] += st.tokens_emitted
                    rep_us[name] += st.timing_us.total
                    t = totals.setdefault(key, {"tokens": 0, "iters": 0, "forced": 0, "forced_ok": 0, "drafts": 0, "ok": 0})
                    t["tokens"] += st.tokens_emitted
                    t["iters"] += st.iters
                    t["forced"] += st.drafts_forced
                    t["forced_ok"] += st.drafts_forced_accepted
                    t["drafts"] += st.drafts_generated - st.drafts_forced
                    t["ok"] += st.drafts_accepted - st.drafts_forced_accepted
            if rep > 0:
                for name in configs:
                    speed.setdefault((load, name), []).append(rep_tokens[name] * 1e6 / rep_us[name])
            for session in sessions.values():
                session.close()
    for load, items in loads.items():
        for name in configs:
            if args.temp == 0 or name == second:
                assert outputs[(load, name)] == outputs[(load, "plain")], f"{load}: {name} differs from plain decoding"
        for text, (_, options) in zip(outputs[(load, "plain")], items):
            if options.grammar is not None and args.temp == 0:
                json.loads(text)

    sampling = f"temperature {args.temp:g}, seed = call index" if args.temp > 0 else "greedy"
    header = (f"Built-in model ({model.path.name}), {args.threads} thread(s), "
              f"{', '.join(f'{len(v)} {k}' for k, v in loads.items())}, {args.max_tokens} tokens max, {sampling}; "
              f"tokens/s of each repetition's calls together, median (min-max) of {args.reps} interleaved "
              f"repetitions; CPU: {cpu_name()}")
    lines = [header, "", f"| workload | configuration | tokens/s (min-max) | x plain | x {second.removeprefix('MTP, ')} | tokens / verify | "
             "forced drafts (accepted) | head drafts (accepted) |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    rows = []
    for load in loads:
        base = statistics.median(speed[(load, "plain")])
        head = statistics.median(speed[(load, second)])
        for name in configs:
            tps = statistics.median(speed[(load, name)])
            t = totals[(load, name)]
            row = {"workload": load, "config": name, "tokens_per_sec": tps, "tokens_per_sec_reps": speed[(load, name)],
                   "x_plain": tps / base, "x_head_only": tps / head, "tokens_per_verify": t["tokens"] / t["iters"], **t}
            rows.append(row)
            lo, hi = min(speed[(load, name)]), max(speed[(load, name)])
            lines.append(f"| {load} | {name} | {tps:.1f} ({lo:.1f}-{hi:.1f}) | {tps / base:.3f} | {tps / head:.3f} | "
                         f"{row['tokens_per_verify']:.2f} | {t['forced']:.0f} ({t['forced_ok']:.0f}) | {t['drafts']:.0f} ({t['ok']:.0f}) |")
    same = "identical in every configuration" if args.temp == 0 else "plain decoding's"
    lines += ["", f"First tool call ({same}): `" + outputs[("tool calls", "plain")][0] + "`",
              "First JSON answer: `" + outputs[("JSON schema", "plain")][0] + "`"]
    text = "\n".join(lines)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.md").write_text(text + "\n")
    (args.out / f"{stem}.json").write_text(json.dumps({"header": header, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
