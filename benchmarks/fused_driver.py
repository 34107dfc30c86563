"""Fused MTP driver against llama.cpp's common_speculative driver on one model.

Usage: python benchmarks/fused_driver.py MODEL.gguf THREADS N_DRAFTS (e.g. 1,3)
Interleaves plain decoding and each driver at each n_draft (3 measured repetitions of
96 greedy tokens after a warm-up) and prints t/s, the ratio to plain and the head and
verify milliseconds per iteration of the last repetition.
"""
import sys, time
from mtp_llm import Model, MTP
m = Model.load(sys.argv[1]); th = int(sys.argv[2]); ks = [int(x) for x in sys.argv[3].split(',')]
sess = {('plain',0): MTP(m, n_draft=0, n_ctx=1024, n_threads=th)}
for k in ks:
    for fuse in (True, False):
        sess[(fuse, k)] = MTP(m, n_draft=k, n_ctx=1024, n_threads=th, fuse_catch_up=fuse)
res = {key: [] for key in sess}
for rep in range(4):
    for key, s in sess.items():
        s.reset_stats()
        s.generate("Hello", max_tokens=96, temp=0)
        if rep: res[key].append(s.stats().tokens_per_sec)
import statistics
base = statistics.median(res[('plain',0)])
for key, v in res.items():
    st = sess[key].stats()
    print(key, f"{statistics.median(v):.1f} t/s  {statistics.median(v)/base:.2f}x  draft_ms/iter={st.timing_us.draft/max(1,st.iters)/1000:.2f} verify_ms/iter={st.timing_us.verify/max(1,st.iters)/1000:.2f}")
