"""Leak soak: create and free models and sessions, run short generations, report RSS growth.

Usage: python benchmarks/soak.py [--iterations 1000] [--warmup 50] [--model PATH] [--parallel N]

Each iteration loads the model, opens an MTP session, streams a short greedy
generation (breaking out of one stream early every third time) and frees both.
With ``--parallel N`` one session with N slots serves every iteration instead: N
threads at once, one abandoning its stream, one timing out, the others finishing
(prompts that share a prefix, so the prompt cache and saved states turn over).
RSS is sampled after the warm-up and at the end; the goal is under 5 MB growth.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return 0.0


def soak(model_path: str, iterations: int, warmup: int) -> dict[str, float]:
    from mtp_llm import MTP, Model

    baseline = 0.0
    for i in range(iterations + warmup):
        model = Model.load(model_path)
        session = MTP(model, n_draft=3, n_ctx=256, n_threads=1)
        if i % 3 == 0:
            for j, _ in enumerate(session.stream("Hello", max_tokens=16, temp=0)):
                if j == 3:
                    break
        else:
            session.generate("Hello", max_tokens=8, temp=0)
        session.close()
        del session, model
        if i == warmup - 1:
            gc.collect()
            baseline = rss_mb()
    gc.collect()
    final = rss_mb()
    return {"iterations": iterations, "rss_after_warmup_mb": baseline, "rss_final_mb": final,
            "growth_mb": final - baseline}


def soak_parallel(model_path: str, iterations: int, warmup: int, n_parallel: int) -> dict[str, float]:
    import threading

    from mtp_llm import MTP, GenerationTimeoutError, Model

    session = MTP(Model.load(model_path), n_draft="auto", n_parallel=n_parallel, n_ctx=256 * n_parallel,
                  n_threads=1, cache_size_mb=1.0)
    baseline = 0.0

    def call(i: int, k: int) -> None:
        prompt = f"Conversation {(i + k) % 7}: hello there, number {k}"
        try:
            if k == 0:
                for j, _ in enumerate(session.stream(prompt, max_tokens=24, temp=0)):
                    if j == 3:
                        break
            elif k == 1:
                session.generate(prompt, max_tokens=200, temp=0, timeout=0.002)
            else:
                session.generate(prompt, max_tokens=12, temp=0)
        except GenerationTimeoutError:
            pass

    for i in range(iterations + warmup):
        threads = [threading.Thread(target=call, args=(i, k)) for k in range(n_parallel)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if i == warmup - 1:
            gc.collect()
            baseline = rss_mb()
    gc.collect()
    final = rss_mb()
    return {"iterations": iterations, "n_parallel": n_parallel, "generations": session.stats().generations,
            "rss_after_warmup_mb": baseline, "rss_final_mb": final, "growth_mb": final - baseline}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--model", help="GGUF with an MTP head (default: the tiny random test model)")
    parser.add_argument("--parallel", type=int, default=0, help="one session with N slots, N calls at once")
    args = parser.parse_args()
    path = args.model
    if path is None:
        from mtp_llm.default_model import cache_dir
        from mtp_llm.gguf.tiny_models import make_tiny_models

        path = str(make_tiny_models(cache_dir() / "tiny-models")["random"])
    if args.parallel:
        result = soak_parallel(path, args.iterations, args.warmup, args.parallel)
    else:
        result = soak(path, args.iterations, args.warmup)
    print(json.dumps(result, indent=2))
    return 0 if result["growth_mb"] < 5.0 else 1


if __name__ == "__main__":
    sys.exit(main())
