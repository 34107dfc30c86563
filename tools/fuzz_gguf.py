"""Fuzz GGUF loading: every mutant must load and generate, or raise an MTPError.

    .venv/bin/python tools/fuzz_gguf.py --model tests/.models/hybrid.gguf --count 400 --seed 1

Mutants come from :func:`tests.helpers.gguf_fuzz.mutate_gguf` (metadata values and tensor-info
fields set to edge values). Each runs in its own subprocess: load, read the metadata,
tokenize, open an MTP session and generate four tokens. A process that dies (an assert in
llama.cpp or ggml aborting, a Python exception that is not an MTPError) is a finding: the
mutant is kept in ``--keep`` and the assert line printed. Exit status 1 when anything died.
(Make the tiny models first with ``mtp-llm make-test-models tests/.models``.)
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.helpers.gguf_fuzz import mutate_gguf, mutate_metadata  # noqa: E402

ONE = """
import sys, mtp_llm
try:
    model = mtp_llm.Model.load(sys.argv[1])
    (model.architecture, model.description, model.chat_template, model.has_mtp_graph)
    model.detokenize(model.tokenize("Hello world"))
    mtp_llm.MTP(model, n_draft=2, n_threads=1, n_ctx=256).generate("Hello", max_tokens=4, temp=0)
    print("ok")
except mtp_llm.MTPError as exc:
    print(type(exc).__name__)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tests/.models/random.gguf")
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", default="build/fuzz-findings", help="where mutants that killed the process go")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a mutant may run before it counts as hung")
    parser.add_argument("--metadata", action="store_true",
                        help="hyperparameters only, well-typed edge values (mutate_metadata) instead of any field")
    args = parser.parse_args()

    outcomes: collections.Counter[str] = collections.Counter()
    findings = []
    with tempfile.TemporaryDirectory() as tmp:
        mutate = mutate_metadata if args.metadata else mutate_gguf
        for path in mutate(args.model, tmp, args.count, args.seed):
            try:
                proc = subprocess.run([sys.executable, "-c", ONE, str(path)], capture_output=True, text=True,
                                      timeout=args.timeout)
            except subprocess.TimeoutExpired:
                outcomes["hung"] += 1  # alive but not done: a finding too (a size the checks let through)
                keep = Path(args.keep)
                keep.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, keep / path.name)
                findings.append(f"{path.name}: still running after {args.timeout} s")
                path.unlink()
                continue
            if proc.returncode == 0:
                outcomes[proc.stdout.strip().splitlines()[-1]] += 1
                continue
            outcomes["died"] += 1
            keep = Path(args.keep)
            keep.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, keep / path.name)
            cause = [line for line in proc.stderr.splitlines() if any(s in line for s in ("ASSERT", "Error", "fatal error"))][:1]
            findings.append(f"{path.name} (rc={proc.returncode}): {cause[0] if cause else proc.stderr[-300:]}")
            path.unlink()
    print(dict(outcomes))
    for finding in findings:
        print("DIED", finding)
    return 1 if findings else 0


if __name__ == "__main__":
    raise SystemExit(main())
