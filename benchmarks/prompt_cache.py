"""Time to first token of a follow-up turn served from the prompt cache against a cold call.

Usage: python benchmarks/prompt_cache.py [THREADS] [MODEL.gguf]
The built-in model (or MODEL), a history of about 1500 tokens: the cold call processes it all; the
follow-up re-sends it with the answer and a new line appended (what a chat chain does)
and processes only what is new. 5 interleaved repetitions, medians.
"""

import statistics
import sys

from mtp_llm import MTP, Model

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
model = Model.load(sys.argv[2]) if len(sys.argv) > 2 else Model.load_default()
history = "ROMEO: But soft, what light through yonder window breaks? It is the east, and Juliet is the sun. " * 60
history = model.detokenize(model.tokenize(history)[:1500])
cold_ms, warm_ms, reused = [], [], []
for _ in range(5):
    for cache_prompt in (False, True):
        session = MTP(model, n_threads=threads, n_ctx=4096, cache_prompt=cache_prompt)
        answer = session.generate(history, max_tokens=16, temp=0)
        follow_up = history + answer + "\nJULIET: Ay me! She speaks."
        session.generate(follow_up, max_tokens=16, temp=0)
        stats = session.last_stats
        (warm_ms if cache_prompt else cold_ms).append(stats.time_to_first_token_us / 1000)
        if cache_prompt:
            reused.append((stats.prompt_tokens, stats.prompt_tokens_cached))
cold, warm = statistics.median(cold_ms), statistics.median(warm_ms)
print(f"{threads} threads: follow-up time to first token, cache off {cold:.1f} ms, on {warm:.1f} ms "
      f"({warm / cold:.3f}x); prompt tokens / reused: {reused[-1]}")
