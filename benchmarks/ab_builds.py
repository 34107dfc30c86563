"""One side of an A/B between two builds of the package (e.g. two worktrees, each with its own
.venv): plain decoding and MTP n_draft=3 on one model, 5 interleaved repetitions of 96 greedy
tokens at 1 thread; prints the medians and the median ratio as JSON. Run it alternately with each
build's python, in separate processes, and compare (docs/performance.md, "Engine structure").

Usage: python benchmarks/ab_builds.py MODEL.gguf
"""
import sys, json, statistics
from mtp_llm import Model, MTP
m = Model.load(sys.argv[1])
s0 = MTP(m, n_draft=0, n_ctx=1024, n_threads=1); s3 = MTP(m, n_draft=3, n_ctx=1024, n_threads=1)
p = "ROMEO: But soft, what light through yonder window breaks?"
for s in (s0, s3): s.generate(p, max_tokens=16, temp=0)
r0, r3 = [], []
for i in range(5):
    for s, r in ((s0, r0), (s3, r3)):
        s.reset_stats(); s.generate(p, max_tokens=96, temp=0, cache_prompt=False); r.append(s.stats().tokens_per_sec)
print(json.dumps({"plain": statistics.median(r0), "n3": statistics.median(r3), "ratio": statistics.median(a/b for a, b in zip(r3, r0))}))
