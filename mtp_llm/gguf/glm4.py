"""Write tiny glm4 GGUF files, optionally with an MTP (nextn) block llama.cpp cannot run.

GLM-4 checkpoints keep their nextn block in the GGUF, and llama.cpp loads the
architecture, but its glm4 graph builder has no MTP draft graph: the block is
skipped. Such a file must decode plainly (``n_draft=0``) and be refused with a
clear error for MTP. Shapes follow llama.cpp's ``src/models/glm4.cpp``
(tensors given in PyTorch ``(out_features, in_features)`` layout).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .common import BpeVocab, add_bpe_vocab, finish_file

ARCH = "glm4"


def write_glm4(
    path: str | Path,
    vocab: BpeVocab,
    *,
    seed: int,
    n_embd: int = 64,
    n_layer: int = 2,
    n_head: int = 4,
    head_dim: int = 16,
    n_ff: int = 128,
    n_nextn: int = 1,
) -> Path:
    """Write a random-weight f32 glm4 model: ``n_layer`` trunk blocks plus ``n_nextn`` (0 or 1) nextn blocks."""
    import gguf

    path = Path(path)
    rng = np.random.default_rng(seed)
    n_vocab = len(vocab.tokens)
    n_qkv = n_head * head_dim

    def random(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    def ones() -> np.ndarray:
        return np.ones(n_embd, np.float32)

    tensors: dict[str, np.ndarray] = {"token_embd.weight": random(n_vocab, n_embd), "output_norm.weight": ones()}
    if n_nextn not in (0, 1):
        raise ValueError("n_nextn must be 0 or 1")
    for i in range(n_layer + n_nextn):
        p = f"blk.{i}."
        tensors |= {
            p + "attn_norm.weight": ones(),
            p + "attn_q.weight": random(n_qkv, n_embd),
            p + "attn_k.weight": random(n_qkv, n_embd),
            p + "attn_v.weight": random(n_qkv, n_embd),
            p + "attn_output.weight": random(n_embd, n_qkv),
            p + "post_attention_norm.weight": ones(),
            p + "ffn_norm.weight": ones(),
            p + "ffn_up.weight": random(2 * n_ff, n_embd),  # gate and up, fused
            p + "ffn_down.weight": random(n_embd, n_ff),
            p + "post_ffw_norm.weight": ones(),
        }
    if n_nextn:
        head = f"blk.{n_layer}.nextn."
        tensors |= {
            head + "eh_proj.weight": random(n_embd, 2 * n_embd),
            head + "enorm.weight": ones(),
            head + "hnorm.weight": ones(),
        }

    writer = gguf.GGUFWriter(str(path), ARCH)
    writer.add_name("mtp-llm-tiny-glm4" + ("-nextn" if n_nextn else ""))
    writer.add_file_type(0)  # all f32
    writer.add_context_length(4096)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer + n_nextn)
    writer.add_nextn_predict_layers(n_nextn)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    add_bpe_vocab(writer, vocab)
    for name, array in tensors.items():
        writer.add_tensor(name, array)
    finish_file(writer)
    return path
