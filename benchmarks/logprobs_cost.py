"""Instructions per generated token with logprobs off, counted by callgrind (repeatable, unlike time).

    .venv/bin/python benchmarks/logprobs_cost.py --out build/logprobs-cost-with.json

The check that logprobs cost nothing when not asked (<= 1%) compares this build with the same tree without the
logprobs path (``benchmarks/logprobs_cost/without-logprobs.patch``: the per-token checks, the
optional field on each token, the binding's branch, the Python ``len`` test); see docs/performance.md
for the sequence of commands. Each model generates N and 2N greedy tokens at 1 thread (no spinning
worker threads: the count is deterministic); (I(2N) - I(N)) / N is the per-token cost, which cancels
start-up, load and prompt processing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

WORKLOAD = """
import sys
import mtp_llm
path, n, n_draft = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
model = mtp_llm.Model.load(path)
session = mtp_llm.MTP(model, n_draft=n_draft, n_threads=1, n_ctx=1024)
prompt = model.apply_chat_template([("user", "Write a long story about a dragon and a knight.")]) \\
    if model.chat_template else "Once upon a time"
count = sum(1 for e in session.stream_events(prompt, max_tokens=n, temp=0) if type(e).__name__ == "TokenEvent")
print("tokens", count)
"""


def instructions(model: str, n: int, n_draft: int) -> tuple[int, int]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        proc = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-c", WORKLOAD,
             model, str(n), str(n_draft)],
            capture_output=True, text=True, check=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},  # the same string hashes, so the same dict work, every run
        )
        tokens = int(re.search(r"tokens (\d+)", proc.stdout).group(1))  # type: ignore[union-attr]
        total = re.search(r"^summary: (\d+)", out.read_text(), re.M)
        return int(total.group(1)), tokens  # type: ignore[union-attr]


def main() -> int:
    from mtp_llm import smollm2

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64, help="N: runs of N and 2N tokens")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tiny-only", action="store_true", help="only the tiny model (minutes, not a quarter hour)")
    args = parser.parse_args()
    models = {"tiny random hy_v3": "tests/.models/random.gguf"}
    if not args.tiny_only:
        models["built-in SmolLM2"] = str(smollm2.built_in_path())
    result = {}
    for name, path in models.items():
        for n_draft in (0, 3):
            (i1, t1), (i2, t2) = instructions(path, args.tokens, n_draft), instructions(path, 2 * args.tokens, n_draft)
            if (t1, t2) != (args.tokens, 2 * args.tokens):
                raise SystemExit(f"{name}: generated {t1}/{t2} tokens, not {args.tokens}/{2 * args.tokens}")
            per_token = (i2 - i1) / args.tokens
            result[f"{name}, n_draft {n_draft}"] = {"instructions_per_token": per_token, "runs": [i1, i2]}
            print(f"{name}, n_draft {n_draft}: {per_token:,.0f} instructions per token", flush=True)
    args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
