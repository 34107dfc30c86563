"""n_draft="auto" against plain decoding and every fixed draft length, interleaved.

Usage: python benchmarks/auto_draft.py [--workloads default,forced,mixed] [--threads 2]
       [--tokens 128] [--reps 3] [--out benchmarks/results/auto_draft]

Workloads (the goals of the automatic draft length, docs/performance.md):
  default  the built-in model on its verse prompts: auto against plain decoding.
  forced   a 151M-parameter f16 synthetic model whose drafts are always accepted
           (memory-bound on a CPU): auto against the best fixed length.
  mixed    one session per configuration serving, in turn, prompts whose acceptance
           differs (the built-in model on repetitive and on free text), and two
           calibrated synthetic models (0.3 and 0.9 per position): auto against the
           best fixed length chosen per prompt in hindsight.

Every configuration is a session of its own; each repetition runs all of them on each
prompt in turn (interleaved), after one warm-up repetition that is not counted (the
automatic length learns during it, as it would in a long-lived session). Rates are decode
tokens over the engine's decode window (prompt excluded), summed over prompts and
repetitions.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
from pathlib import Path
from typing import Any

from mtp_llm import MTP, Model
from mtp_llm.bench import DEFAULT_PROMPTS, SYNTHETIC_PROMPTS
from mtp_llm.gguf.synthetic import synthetic_model

FIXED = [0, 1, 2, 3, 4]
CONFIGS: list[int | str] = [*FIXED, "auto"]
REPETITIVE = ["And the king said, and the king said, and the king said,", "la la la la la la la la la la la"]


def measure(
    models: dict[str, Model], prompts: dict[str, list[str]], threads: int, tokens: int, reps: int
) -> dict[str, dict[str, dict[str, list[float]]]]:
    """[workload class][config][prompt] -> [tokens, microseconds], summed over repetitions."""
    sessions = {
        (name, cfg): MTP(model, n_draft=cfg, n_ctx=tokens + 512, n_threads=threads)
        for name, model in models.items()
        for cfg in CONFIGS
    }
    out: dict[str, dict[str, dict[str, list[float]]]] = {
        name: {str(cfg): {p: [0.0, 0.0] for p in prompts[name]} for cfg in CONFIGS} for name in models
    }
    for rep in range(reps + 1):
        for name in models:
            for prompt in prompts[name]:
                for cfg in CONFIGS:
                    session = sessions[(name, cfg)]
                    session.generate(prompt, max_tokens=tokens, temp=0)
                    s = session.last_stats
                    if rep:
                        cell = out[name][str(cfg)][prompt]
                        cell[0] += s.tokens_emitted
                        cell[1] += s.timing_us.total
    for (name, cfg), session in sessions.items():
        if cfg == "auto":
            out[name]["auto_summary"] = session.stats().to_dict()  # type: ignore[assignment]
    return out


def rate(cells: dict[str, list[float]], prompts: list[str]) -> float:
    tokens = sum(cells[p][0] for p in prompts)
    us = sum(cells[p][1] for p in prompts)
    return tokens * 1e6 / us if us else 0.0


def report(name: str, data: dict[str, Any], prompts: list[str]) -> dict[str, Any]:
    plain = rate(data["0"], prompts)
    rates = {str(c): rate(data[str(c)], prompts) for c in CONFIGS}
    best_fixed = max(FIXED, key=lambda k: rates[str(k)])
    # Best fixed length per prompt in hindsight: the time each prompt takes at its best length.
    hindsight_tokens = hindsight_us = 0.0
    per_prompt = {}
    for p in prompts:
        best_k = max(FIXED, key=lambda k: data[str(k)][p][0] / max(1.0, data[str(k)][p][1]))
        hindsight_tokens += data[str(best_k)][p][0]
        hindsight_us += data[str(best_k)][p][1]
        auto = data["auto"][p][0] / max(1.0, data["auto"][p][1])
        best = data[str(best_k)][p][0] / max(1.0, data[str(best_k)][p][1])
        per_prompt[p] = {"best_fixed": best_k, "auto_vs_best": round(auto / best, 3)}
    hindsight = hindsight_tokens * 1e6 / hindsight_us
    return {
        "workload": name,
        "tokens_per_s": {c: round(r, 1) for c, r in rates.items()},
        "x_plain": {c: round(r / plain, 3) for c, r in rates.items()},
        "best_fixed": best_fixed,
        "auto_vs_best_fixed": round(rates["auto"] / rates[str(best_fixed)], 3),
        "auto_vs_best_fixed_per_prompt": round(rates["auto"] / hindsight, 3),
        "per_prompt": per_prompt,
        "auto_lengths": data["auto_summary"]["draft_length_counts"],
        "auto_undrafted_share": round(data["auto_summary"]["undrafted_share"], 3),
        "auto_acceptance": round(data["auto_summary"]["acceptance_rate"], 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default="default,forced,mixed")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default="benchmarks/results/auto_draft")
    args = ap.parse_args()

    rows = []
    for workload in args.workloads.split(","):
        if workload == "default":
            models = {"default": Model.load_default()}
            prompts = {"default": DEFAULT_PROMPTS}
        elif workload == "forced":
            models = {"forced": Model.load(synthetic_model("150M", None, "f16"))}
            prompts = {"forced": SYNTHETIC_PROMPTS[:4]}
        elif workload == "mixed":
            models = {
                "default": Model.load_default(),
                "p0.3": Model.load(synthetic_model("150M", 0.3, "f16")),
                "p0.9": Model.load(synthetic_model("150M", 0.9, "f16")),
            }
            prompts = {
                "default": [DEFAULT_PROMPTS[0], REPETITIVE[0], DEFAULT_PROMPTS[1], REPETITIVE[1]],
                "p0.3": SYNTHETIC_PROMPTS[:2],
                "p0.9": SYNTHETIC_PROMPTS[2:4],
            }
        else:
            raise SystemExit(f"unknown workload {workload!r}")
        data = measure(models, prompts, args.threads, args.tokens, args.reps)
        if workload == "mixed":
            # One mixed workload: every prompt class's time, at auto and at its best fixed length.
            merged: dict[str, Any] = {str(c): {} for c in CONFIGS}
            for name in models:
                for c in CONFIGS:
                    merged[str(c)].update({f"{name}: {p}": v for p, v in data[name][str(c)].items()})
            merged["auto_summary"] = data["default"]["auto_summary"]
            row = report("mixed", merged, list(merged["0"]))
            row["auto_summary_by_model"] = {
                n: {k: data[n]["auto_summary"][k] for k in ("draft_length_counts", "acceptance_rate")} for n in models
            }
            rows.append(row)
        else:
            rows.append(report(workload, data[workload], prompts[workload]))
        print(json.dumps(rows[-1], indent=1))

    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model_name = next((ln.split(":", 1)[1].strip() for ln in cpu.splitlines() if ln.startswith("Model name")), "?")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"cpu": model_name, "machine": platform.machine(), "threads": args.threads, "tokens": args.tokens,
            "reps": args.reps}
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = [
        f"# n_draft=auto against fixed lengths ({model_name}, {args.threads} threads, {args.tokens} tokens, "
        f"{args.reps} interleaved repetitions after a warm-up)",
        "",
        "| workload | plain t/s | x plain: 1 | 2 | 3 | 4 | auto | best fixed | auto / best fixed | "
        "auto / best per prompt | auto lengths 0..4 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        x = r["x_plain"]
        lines.append(
            f"| {r['workload']} | {r['tokens_per_s']['0']} | {x['1']} | {x['2']} | {x['3']} | {x['4']} | "
            f"{x['auto']} | {r['best_fixed']} | {r['auto_vs_best_fixed']} | {r['auto_vs_best_fixed_per_prompt']} | "
            f"{r['auto_lengths']} |"
        )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
