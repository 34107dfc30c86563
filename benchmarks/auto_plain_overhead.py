"""Plain decoding inside an automatic-draft session against a plain session.

Usage: python benchmarks/auto_plain_overhead.py THREADS
Three sessions on the built-in model, 20 interleaved repetitions of 128 greedy tokens on
a prompt whose drafts do not pay: a plain session (n_draft=0), an automatic session called
with n_draft=0, and an automatic session that has learnt to decode plainly (after 6 calls).
Prints the median decode time per token of each and its ratio to the plain session.
"""

import statistics
import sys

from mtp_llm import MTP, Model

model = Model.load_default()
threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
prompt = "Of Man's first disobedience, and the fruit"
plain = MTP(model, n_draft=0, n_threads=threads, n_ctx=1024)
auto = MTP(model, n_threads=threads, n_ctx=1024)
auto_called_plain = MTP(model, n_threads=threads, n_ctx=1024)
for _ in range(6):
    auto.generate(prompt, max_tokens=128, temp=0)
runs: dict[str, list[float]] = {"plain": [], "auto, call n_draft=0": [], "auto": []}
for _ in range(20):
    for name, session, extra in [
        ("plain", plain, {}),
        ("auto, call n_draft=0", auto_called_plain, {"n_draft": 0}),
        ("auto", auto, {}),
    ]:
        session.generate(prompt, max_tokens=128, temp=0, **extra)
        stats = session.last_stats
        runs[name].append(stats.timing_us.total / stats.tokens_emitted)
base = statistics.median(runs["plain"])
for name, values in runs.items():
    print(f"{threads} threads  {name:22s} {statistics.median(values):8.1f} us/token  {statistics.median(values) / base:.3f}x")
print("auto session's draft lengths 0..4:", auto.stats().draft_length_counts)
