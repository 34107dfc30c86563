"""Our engine (plain and MTP) against llama-cpp-python's plain decoding, same GGUF and threads.

llama-cpp-python is what users pick today; it has no MTP. Set it up once in its own
virtual environment (it compiles llama.cpp, several minutes on 2 cores):

    python3 -m venv .venv-peer && .venv-peer/bin/pip install llama-cpp-python==0.3.36

Then run this script with the project's venv:

    .venv/bin/python benchmarks/compare_llama_cpp_python.py [--model M.gguf] [--n-draft 1,3,auto] [--chat]
        [--tokens 128] [--threads 2] [--reps 3]

Each repetition runs llama-cpp-python (in a subprocess of .venv-peer), our plain decoding and
our MTP at each n_draft, interleaved, greedy, on the same prompts: the first 8 held-out prompts
(benchmarks/prompts/heldout.json), or with ``--chat`` the four chat questions of
``built_in_speed.py`` rendered through the model's chat template. The default model is the
built-in one; llama-cpp-python's stock llama.cpp rejects its MTP head's tensors ("wrong number of
tensors"), so the peer reads the source file the built-in model was made from: the same trunk tensors, byte for byte,
without the head (``--peer-model`` names another file).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PEER = textwrap.dedent(
    """
    import json, sys, time
    from llama_cpp import Llama
    model, prompts, tokens, threads = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    llm = Llama(model_path=model, n_ctx=2048, n_threads=threads, n_threads_batch=threads, verbose=False)
    llm.create_completion(prompts[0], max_tokens=8, temperature=0)
    n, decode_s = 0, 0.0
    for p in prompts:
        start, first = time.perf_counter(), None
        for chunk in llm.create_completion(p, max_tokens=tokens, temperature=0, top_k=1, stream=True):
            if first is None:
                first = time.perf_counter()
            n += 1
        decode_s += time.perf_counter() - first
    print(json.dumps({"tokens": n, "decode_tps": n / decode_s}))
    """
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model")
    parser.add_argument("--n-draft", default="1,3", help="comma-separated lengths; 'auto' allowed")
    parser.add_argument("--chat", action="store_true", help="chat questions through the chat template")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--peer-model", help="the file llama-cpp-python loads (default: --model, or the built-in "
                        "model's trunk-only source)")
    parser.add_argument("--peer-python", default=str(ROOT / ".venv-peer" / "bin" / "python"))
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args()

    from mtp_llm import MTP, Model
    from mtp_llm.default_model import default_model_path

    if not Path(args.peer_python).exists():
        print(f"{args.peer_python} not found: see the set-up command in this script's docstring", file=sys.stderr)
        return 2
    model_path = args.model or str(default_model_path())
    if args.peer_model:
        peer_model_path = args.peer_model
    elif args.model:
        peer_model_path = args.model
    else:
        from mtp_llm.smollm2 import source_path

        peer_model_path = str(source_path())
    model = Model.load(model_path)
    if args.chat:
        from mtp_llm.bench.common import CHAT_QUESTIONS

        prompts = [model.apply_chat_template([("user", q)]) for q in CHAT_QUESTIONS]
    else:
        prompts = json.loads((ROOT / "benchmarks" / "prompts" / "heldout.json").read_text())["prompts"][:8]
    configs: list[int | str] = [0, *[k if k == "auto" else int(k) for k in args.n_draft.split(",")]]
    sessions = {k: MTP(model, n_draft=k, n_ctx=2048, n_threads=args.threads) for k in configs}
    results: dict[str, list[float]] = {"llama-cpp-python (plain)": []}
    results.update({("mtp_llm plain" if k == 0 else f"mtp_llm MTP n_draft={k}"): [] for k in configs})
    for _ in range(args.reps):
        proc = subprocess.run(
            [args.peer_python, "-c", PEER, peer_model_path, json.dumps(prompts), str(args.tokens), str(args.threads)],
            capture_output=True, text=True, timeout=900,
        )
        if proc.returncode:
            print(proc.stderr[-3000:], file=sys.stderr)
            return 1
        results["llama-cpp-python (plain)"].append(json.loads(proc.stdout.strip().splitlines()[-1])["decode_tps"])
        for k, session in sessions.items():
            session.reset_stats()
            for p in prompts:
                session.generate(p, max_tokens=args.tokens, temp=0)
            results["mtp_llm plain" if k == 0 else f"mtp_llm MTP n_draft={k}"].append(session.stats().tokens_per_sec)
    peer = statistics.median(results["llama-cpp-python (plain)"])
    lines = ["| engine | decode t/s (median, min-max) | ratio to llama-cpp-python |", "|---|---|---|"]
    for name, values in results.items():
        med = statistics.median(values)
        lines.append(f"| {name} | {med:.1f} ({min(values):.1f}-{max(values):.1f}) | {med / peer:.3f} |")
    from mtp_llm.bench.common import cpu_name

    peer_note = "" if peer_model_path == model_path else f" (llama-cpp-python: {Path(peer_model_path).name})"
    header = (f"{Path(model_path).name}{peer_note}, {len(prompts)} {'chat' if args.chat else 'held-out'} prompts x {args.tokens} "
              f"tokens, greedy, {args.threads} threads, {args.reps} interleaved repetitions; CPU: {cpu_name()}")
    table = header + "\n\n" + "\n".join(lines)
    print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "llama_cpp_python.md").write_text(table + "\n")
    record = {"model": model_path, "peer_model": peer_model_path, "cpu": cpu_name(), "results": results}
    (out / "llama_cpp_python.json").write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
