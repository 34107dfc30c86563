"""The CPU variant a wheel loads against a build tuned for this CPU (``-DGGML_NATIVE=ON``), on the built-in model:
plain decoding and MTP, each build in its own process, the builds interleaved per repetition.

    .venv/bin/python benchmarks/cpu_variant_speed.py --native .venv-native/bin/python [--variants haswell] \\
        [--threads 2] [--reps 5] [--out DIR]

The native build: ``MTP_LLM_VENV=.venv-native MTP_LLM_BUILD_DIR=build/native MTP_LLM_CONVERT_VENV=none
MTP_LLM_EXTRAS=test CMAKE_ARGS=-DGGML_NATIVE=ON bash scripts/setup.sh`` (a venv and build directory of its own). Four chat prompts x 128
tokens, greedy; each process warms up on one prompt first; medians of the decode rates (``tokens_per_sec``).
``--variants`` adds forced variants of the default build (``MTP_LLM_CPU_VARIANT``). Writes DIR/cpu_variants.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from mtp_llm.bench.common import CHAT_QUESTIONS, cpu_name

WORKER = """
import json, sys
from mtp_llm import MTP, Model, cpu_backend
questions, tokens, threads = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
model = Model.load_default()
prompts = [model.apply_chat_template([("user", q)]) for q in questions]
sessions = {"plain": MTP(model, n_draft=0, n_threads=threads), "n_draft 1": MTP(model, n_draft=1, n_threads=threads),
            "auto": MTP(model, n_draft="auto", n_threads=threads)}
for session in sessions.values():
    session.generate(prompts[0], max_tokens=tokens, temp=0)
rates = {name: [] for name in sessions}
for prompt in prompts:
    for name, session in sessions.items():
        session.generate(prompt, max_tokens=tokens, temp=0)
        rates[name].append(session.last_stats.tokens_per_sec)
print(json.dumps({"variant": cpu_backend().variant, "rates": rates}))
"""


def run_worker(python: str, env: dict[str, str], tokens: int, threads: int) -> dict[str, object]:
    out = subprocess.run([python, "-c", WORKER, json.dumps(CHAT_QUESTIONS), str(tokens), str(threads)],
                         capture_output=True, text=True, env={**os.environ, **env}, check=True)
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--native", required=True, help="the python of a -DGGML_NATIVE=ON build")
    parser.add_argument("--variants", default="", help="comma-separated variants of the default build to force")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args()
    builds: dict[str, tuple[str, dict[str, str]]] = {"default build": (sys.executable, {}),
                                                     "native build": (args.native, {})}
    for variant in filter(None, args.variants.split(",")):
        builds[f"default build, {variant} forced"] = (sys.executable, {"MTP_LLM_CPU_VARIANT": variant})
    samples: dict[str, dict[str, list[float]]] = {b: {} for b in builds}
    loaded: dict[str, str] = {}
    for rep in range(args.reps):
        for label, (python, env) in builds.items():
            result = run_worker(python, env, args.tokens, args.threads)
            loaded[label] = str(result["variant"])
            for mode, rates in result["rates"].items():  # type: ignore[attr-defined]
                samples[label].setdefault(mode, []).extend(rates)
            print(f"rep {rep + 1}/{args.reps} {label}: " + ", ".join(
                f"{m} {statistics.median(r):.1f}" for m, r in result["rates"].items()), file=sys.stderr)  # type: ignore[attr-defined]
    native = {mode: statistics.median(r) for mode, r in samples["native build"].items()}
    lines = [f"CPU: {cpu_name()}; {args.threads} threads; 4 chat prompts x {args.tokens} tokens, greedy; "
             f"{args.reps} interleaved repetitions, medians of decode tokens/s",
             "", "| build | CPU backend | plain t/s | x native | n_draft 1 t/s | x native | auto t/s | x native |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for label in builds:
        med = {mode: statistics.median(r) for mode, r in samples[label].items()}
        cells = [f"{med[m]:.1f} | {med[m] / native[m]:.3f}" for m in ("plain", "n_draft 1", "auto")]
        lines.append(f"| {label} | {loaded[label]} | " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cpu_variants.md").write_text(table + "\n")
    (args.out / "cpu_variants.json").write_text(json.dumps({"loaded": loaded, "samples": samples}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
