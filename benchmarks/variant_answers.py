"""Which CPU variants print the same greedy answers as the first one, on the built-in model or a GGUF of yours.

    .venv/bin/python benchmarks/variant_answers.py [--variants zen4,haswell,sandybridge,sse42,x64] [--tokens 64] \
        [--model MODEL.gguf]

Each variant (``MTP_LLM_CPU_VARIANT``, one process each) answers the twenty chat requests of
``mtp_llm.bench.common.CHAT_PROMPTS`` greedily (plain decoding, 2 threads). Prints, per variant, how many answers equal
the first variant's and, for the others, the number of tokens they share before parting. Variants that round alike (the x86 ones
with FMA, every arm64 one) print 20 of 20; the rest part wherever the int8 rounding of activations turns a last-bit
difference into another quantization step (``benchmarks/variant_logits.py`` shows that every variant stays as close to
a float64 forward).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

WORKER = """
import json, sys
from mtp_llm import MTP, Model, cpu_backend
from mtp_llm.bench.common import CHAT_PROMPTS
model = Model.load(sys.argv[2]) if sys.argv[2] else Model.load_default()
session = MTP(model, n_draft=0, n_threads=2)
answers = [session.generate(model.apply_chat_template([("user", q)]), max_tokens=int(sys.argv[1]), temp=0)
           for q in CHAT_PROMPTS]
print(json.dumps({"variant": cpu_backend().variant, "answers": answers}))
"""


def answers_of(variant: str, tokens: int, model: str) -> list[str]:
    env = {**os.environ, "MTP_LLM_CPU_VARIANT": variant}
    done = subprocess.run([sys.executable, "-c", WORKER, str(tokens), model], capture_output=True, text=True, env=env,
                          check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["variant"] == variant, result["variant"]
    answers: list[str] = result["answers"]
    return answers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="zen4,haswell,sandybridge,sse42,x64")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--model", default="", help="a GGUF file (default: the built-in model)")
    args = parser.parse_args()

    from mtp_llm import Model

    model = Model.load(args.model) if args.model else Model.load_default()
    variants = args.variants.split(",")
    first = answers_of(variants[0], args.tokens, args.model)
    print(f"| variant | answers equal to {variants[0]}'s | tokens in common where the others part |")
    print("|---|---:|---|")
    for variant in variants:
        answers = first if variant == variants[0] else answers_of(variant, args.tokens, args.model)
        parted = []
        for mine, theirs in zip(answers, first):
            if mine != theirs:
                at = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
                parted.append(len(model.tokenize(mine[:at], add_special=False)))
        equal = len(answers) - len(parted)
        print(f"| {variant} | {equal} of {len(answers)} | {', '.join(map(str, sorted(parted))) or '-'} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
