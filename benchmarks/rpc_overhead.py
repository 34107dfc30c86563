"""Decode speed over ggml's RPC backend on loopback against the same model run locally.

Usage: python benchmarks/rpc_overhead.py [REPS] [THREADS]
Starts two `mtp-llm rpc-server` processes on 127.0.0.1 (THREADS threads each), loads each
model locally and spread over the two servers (every layer offloaded, half on each; the
MTP head and token embeddings stay local), then runs REPS interleaved repetitions of 64
greedy tokens, plain (n_draft=0) and MTP (n_draft=3), local and RPC. Prints the median
decode tokens/s of each and the median of the per-repetition RPC/local ratios.
Run it when nothing else (no build) is using the CPUs.
"""

from __future__ import annotations

import socket
import statistics
import subprocess
import sys
import time

from mtp_llm import MTP, Model, _core
from mtp_llm.errors import ModelLoadError
from mtp_llm.gguf.synthetic import synthetic_model

REPS = int(sys.argv[1]) if len(sys.argv) > 1 else 7
THREADS = int(sys.argv[2]) if len(sys.argv) > 2 else 1
PROMPT = "Of Man's first disobedience, and the fruit"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [sys.executable, "-m", "mtp_llm", "rpc-server", "--port", str(port), "--threads", str(THREADS)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"127.0.0.1:{port}"
    for _ in range(300):
        try:
            _core.rpc_probe(endpoint, 1.0)
            return proc, endpoint
        except ModelLoadError:
            time.sleep(0.1)
    raise SystemExit(f"rpc-server on {endpoint} did not start")


def decode_tps(session: MTP, n_draft: int) -> float:
    session.generate(PROMPT, max_tokens=64, temp=0, n_draft=n_draft)
    s = session.last_stats
    return s.tokens_emitted * 1e6 / (s.timing_us.total - s.prompt_us)


def main() -> None:
    servers = [start_server() for _ in range(2)]
    endpoints = [e for _, e in servers]
    try:
        for name, path in [
            ("built-in (SmolLM2-135M-Instruct Q4_1, 108 MB)", None),
            ("synthetic 150M f16 (318 MB)", synthetic_model("150M", None, "f16")),
        ]:
            local_model = Model.load(path) if path else Model.load_default()
            rpc_model = (Model.load(path, rpc_servers=endpoints, tensor_split=[1, 1]) if path
                         else Model.load_default(rpc_servers=endpoints, tensor_split=[1, 1]))
            sessions = {
                "local": MTP(local_model, n_draft=3, n_threads=THREADS, n_ctx=512),
                "rpc": MTP(rpc_model, n_draft=3, n_threads=THREADS, n_ctx=512),
            }
            for s in sessions.values():  # warm-up: graphs, caches, the servers' first graph
                s.generate(PROMPT, max_tokens=16, temp=0)
                s.generate(PROMPT, max_tokens=16, temp=0, n_draft=0)
            for mode, n_draft in [("plain", 0), ("MTP n_draft=3", 3)]:
                tps: dict[str, list[float]] = {"local": [], "rpc": []}
                ratios = []
                for _ in range(REPS):
                    loc = decode_tps(sessions["local"], n_draft)
                    rem = decode_tps(sessions["rpc"], n_draft)
                    tps["local"].append(loc)
                    tps["rpc"].append(rem)
                    ratios.append(rem / loc)
                print(
                    f"{name:30s} {mode:14s} local {statistics.median(tps['local']):7.1f} t/s  "
                    f"rpc {statistics.median(tps['rpc']):7.1f} t/s  ratio {statistics.median(ratios):.3f} "
                    f"(min {min(ratios):.3f}, max {max(ratios):.3f})",
                    flush=True,
                )
            del sessions, local_model, rpc_model
    finally:
        for proc, _ in servers:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
