"""One greedy generation on the built-in model, for scripts/check_wheel.sh: prints a JSON line with the CPU variant
loaded, the tokens of MTP and of plain decoding, and how long each part took (import, model load, first token).

Run by the venv of an installed wheel, natively and under qemu-user's CPU models; MTP_LLM_CPU_VARIANT forces a
variant for the comparison with qemu's runs. Arguments: [max_tokens [model.gguf]]."""

from __future__ import annotations

import json
import sys
import time

start = time.perf_counter()
from mtp_llm import MTP, Model, TokenEvent, cpu_backend  # noqa: E402

imported = time.perf_counter()
max_tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 16
# A path skips the built-in model's fetch-and-check step (it imports NumPy, whose CPU dispatch faults under qemu's
# SSE4.2-only models); the native run prints the path for the emulated ones.
model = Model.load(sys.argv[2]) if len(sys.argv) > 2 else Model.load_default()
loaded = time.perf_counter()
session = MTP(model, n_threads=2)
prompt = model.apply_chat_template([{"role": "user", "content": "Why is the sky blue?"}])
tokens: list[int] = []
first_token = None
for event in session.stream_events(prompt, max_tokens=max_tokens, temp=0):
    if isinstance(event, TokenEvent):
        if first_token is None:
            first_token = time.perf_counter()
        tokens.append(event.id)
stats = session.last_stats
plain: list[int] = [e.id for e in session.stream_events(prompt, max_tokens=max_tokens, temp=0, n_draft=0)
                    if isinstance(e, TokenEvent)]
print(json.dumps({
    "variant": cpu_backend().variant,
    "model_path": str(model.path),
    "mtp_tokens": tokens,
    "plain_tokens": plain,
    "text": model.detokenize(tokens),
    "drafts_accepted": stats.drafts_accepted,
    "drafts_generated": stats.drafts_generated,
    "import_s": round(imported - start, 2),
    "load_s": round(loaded - imported, 2),
    "first_token_s": round((first_token or loaded) - loaded, 2),
}))
