"""How far each CPU variant's logits are from a float64 forward of the same quantized weights, on the built-in model.

    .venv/bin/python benchmarks/variant_logits.py [--variants x64,sse42,haswell,zen4] [--prompt TEXT]

Each variant (``MTP_LLM_CPU_VARIANT``, one process each) runs the trunk over the chat-templated prompt
(``mtp_llm.parity.forward_with_head``); the reference dequantizes every weight (gguf's ``dequantize``) and runs
SmolLM2's llama forward in float64 numpy (RMS norm, adjacent-pair RoPE, grouped-query causal attention, SwiGLU) with
no int8 activation rounding, which llama.cpp's quantized products do. Prints, per variant, the mean and max absolute
log-probability difference over the reference's top 10 tokens at every position, where the argmax agrees, and
whether the variant's logits equal the first variant's bit for bit (patch 0027 makes the AVX2 and AVX-512 ones so).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

WORKER = """
import sys, numpy as np
from mtp_llm import Model
from mtp_llm.parity import forward_with_head
m = Model.load_default()
ids = m.tokenize(m.apply_chat_template([("user", sys.argv[2])]))
np.save(sys.argv[1], forward_with_head(m, ids)["trunk_logits"].astype(np.float64))
"""


def log_softmax(z: np.ndarray) -> np.ndarray:
    top = z.max(-1, keepdims=True)
    return z - top - np.log(np.exp(z - top).sum(-1, keepdims=True))


def reference_logits(prompt: str) -> np.ndarray:
    """SmolLM2's forward in float64 over the built-in model's dequantized weights."""
    import gguf
    from gguf.quants import dequantize

    from mtp_llm import Model

    model = Model.load_default()
    ids = model.tokenize(model.apply_chat_template([("user", prompt)]))
    tensors = {t.name: t for t in gguf.GGUFReader(str(model.path)).tensors}

    def weight(name: str) -> np.ndarray:
        t = tensors[name]
        values = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float64)
        return values.reshape(int(t.shape[1]), int(t.shape[0])) if len(t.shape) == 2 else values.reshape(-1)

    n_layer, n_head, n_kv, head_dim, eps = 30, 9, 3, 64, 1e-5  # SmolLM2-135M's trunk (the head is block 30)
    embd = weight("token_embd.weight")
    x = embd[ids]
    n = len(ids)
    angles = np.arange(n)[:, None] * (100000.0 ** (-np.arange(0, head_dim, 2) / head_dim))[None, :]
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    causal = np.triu(np.full((n, n), -np.inf), 1)

    def rms(v: np.ndarray, w: np.ndarray) -> np.ndarray:
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * w

    def rope(q: np.ndarray) -> np.ndarray:
        out = np.empty_like(q)
        out[..., 0::2] = q[..., 0::2] * cos - q[..., 1::2] * sin
        out[..., 1::2] = q[..., 0::2] * sin + q[..., 1::2] * cos
        return out

    for layer in range(n_layer):
        w = lambda name: weight(f"blk.{layer}.{name}.weight")  # noqa: E731
        h = rms(x, w("attn_norm"))
        q = rope((h @ w("attn_q").T).reshape(n, n_head, head_dim))
        k = rope((h @ w("attn_k").T).reshape(n, n_kv, head_dim))
        v = (h @ w("attn_v").T).reshape(n, n_kv, head_dim)
        out = np.empty((n, n_head, head_dim))
        for head in range(n_head):
            kv = head // (n_head // n_kv)
            scores = q[:, head] @ k[:, kv].T / np.sqrt(head_dim) + causal
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            out[:, head] = (scores / scores.sum(-1, keepdims=True)) @ v[:, kv]
        x = x + out.reshape(n, -1) @ w("attn_output").T
        h = rms(x, w("ffn_norm"))
        gate = h @ w("ffn_gate").T
        x = x + (gate / (1 + np.exp(-gate)) * (h @ w("ffn_up").T)) @ w("ffn_down").T
    output = weight("output.weight") if "output.weight" in tensors else embd
    return rms(x, weight("output_norm.weight")) @ output.T


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="x64,sse42,haswell,zen4")
    parser.add_argument("--prompt", default="The capital of France is")
    args = parser.parse_args()
    reference = log_softmax(reference_logits(args.prompt))
    top = np.argsort(-reference, -1)[:, :10]
    print("| variant | top-10 mean abs dlogprob vs float64 | max | argmax agrees | bit-equal to the first |\n"
          "|---|---:|---:|---:|---|")
    first: np.ndarray | None = None
    with tempfile.TemporaryDirectory() as tmp:
        for variant in args.variants.split(","):
            path = Path(tmp) / f"{variant}.npy"
            env = {**os.environ, "MTP_LLM_CPU_VARIANT": variant}
            subprocess.run([sys.executable, "-c", WORKER, str(path), args.prompt], env=env, check=True)
            raw = np.load(path)
            first = raw if first is None else first
            logits = log_softmax(raw)
            diff = np.abs(np.take_along_axis(logits, top, -1) - np.take_along_axis(reference, top, -1))
            agree = (logits.argmax(-1) == reference.argmax(-1)).mean()
            same = "yes" if np.array_equal(raw, first) else f"no (max {np.abs(raw - first).max():.3g})"
            print(f"| {variant} | {diff.mean():.4f} | {diff.max():.4f} | {agree:.2f} | {same} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
