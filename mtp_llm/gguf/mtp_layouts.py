"""Write tiny random-weight models of the two MTP layouts the other writers do not cover.

* ``llama`` with an embedded nextn block (``blk.<n_layer>.nextn.*`` + a llama decoder block):
  the built-in SmolLM2 model's layout, run by patch 0005's MTP graph.
* ``glm4moe``: leading dense blocks, then MoE blocks (routed experts, a shared expert, a
  score-correction bias); its nextn block must have an MoE FFN (llama.cpp's MTP graph asserts it).

They let tests and ``tools/fuzz_gguf.py --metadata`` exercise these architectures' loaders and
MTP graphs without the 98 MB built-in model. Shapes follow the pinned tree's
``src/models/glm4-moe.cpp`` and patch 0005 (tensors given in PyTorch ``(out, in)`` layout).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .common import BpeVocab, add_bpe_vocab, finish_file


class RandomTensors:
    """Random f32 tensors of one model, by GGUF name (``all``): embeddings, attention and dense FFN per
    block, the nextn block's own. Also for tests that write other small architectures."""

    def __init__(self, seed: int, n_vocab: int, n_embd: int, n_head: int, n_head_kv: int, head_dim: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.n_embd, self.n_q, self.n_kv = n_embd, n_head * head_dim, n_head_kv * head_dim
        self.ones = np.ones(n_embd, np.float32)
        self.all = {"token_embd.weight": self.random(n_vocab, n_embd), "output_norm.weight": self.ones}

    def random(self, *shape: int) -> np.ndarray:
        return (self.rng.standard_normal(shape) * 0.05).astype(np.float32)

    def attention(self, block: int, *, bias: bool = False) -> None:
        p, e = f"blk.{block}.", self.n_embd
        self.all |= {p + "attn_norm.weight": self.ones, p + "attn_output.weight": self.random(e, self.n_q)}
        for name, rows in (("q", self.n_q), ("k", self.n_kv), ("v", self.n_kv)):
            self.all[f"{p}attn_{name}.weight"] = self.random(rows, e)
            if bias:
                self.all[f"{p}attn_{name}.bias"] = self.random(rows)

    def dense_ffn(self, block: int, n_ff: int) -> None:
        p, e = f"blk.{block}.", self.n_embd
        self.all |= {p + "ffn_gate.weight": self.random(n_ff, e), p + "ffn_up.weight": self.random(n_ff, e),
                     p + "ffn_down.weight": self.random(e, n_ff)}

    def nextn(self, block: int) -> None:
        p = f"blk.{block}.nextn."
        self.all |= {p + "eh_proj.weight": self.random(self.n_embd, 2 * self.n_embd), p + "enorm.weight": self.ones,
                     p + "hnorm.weight": self.ones, p + "shared_head_norm.weight": self.ones}


def _write(path: Path, arch: str, vocab: BpeVocab, tensors: RandomTensors, *, n_layer: int, n_head: int,
           n_head_kv: int, n_ff: int, rope_dims: int, keys: dict[str, Any]) -> Path:
    import gguf

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(f"mtp-llm-tiny-{arch}-mtp")
    writer.add_file_type(0)  # all f32
    writer.add_context_length(4096)
    writer.add_embedding_length(tensors.n_embd)
    writer.add_block_count(n_layer + 1)
    writer.add_nextn_predict_layers(1)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(rope_dims)
    for key, value in keys.items():
        getattr(writer, f"add_{key}")(value)
    add_bpe_vocab(writer, vocab)
    for name, array in tensors.all.items():
        writer.add_tensor(name, array)
    finish_file(writer)
    return path


def write_llama_mtp(
    path: str | Path, vocab: BpeVocab, *, seed: int, n_embd: int = 64, n_layer: int = 2, n_head: int = 4,
    n_head_kv: int = 2, n_ff: int = 128,
) -> Path:
    """A llama model of ``n_layer`` blocks plus one nextn block (the built-in model's layout), f32."""
    head_dim = n_embd // n_head
    t = RandomTensors(seed, len(vocab.tokens), n_embd, n_head, n_head_kv, head_dim)
    for i in range(n_layer + 1):
        t.attention(i)
        t.dense_ffn(i, n_ff)
        t.all[f"blk.{i}.ffn_norm.weight"] = t.ones
    t.nextn(n_layer)
    return _write(Path(path), "llama", vocab, t, n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv, n_ff=n_ff,
                  rope_dims=head_dim, keys={"rope_freq_base": 10000.0, "vocab_size": len(vocab.tokens)})


def write_glm4moe(
    path: str | Path, vocab: BpeVocab, *, seed: int, n_embd: int = 64, n_layer: int = 2, n_dense: int = 1,
    n_head: int = 4, n_head_kv: int = 2, head_dim: int = 16, n_ff: int = 128, n_expert: int = 4,
    n_expert_used: int = 2, n_ff_exp: int = 32,
) -> Path:
    """A glm4moe model: ``n_dense`` dense blocks, MoE blocks up to ``n_layer``, one MoE nextn block, f32."""
    import gguf

    t = RandomTensors(seed, len(vocab.tokens), n_embd, n_head, n_head_kv, head_dim)
    for i in range(n_layer + 1):
        t.attention(i, bias=True)
        t.all[f"blk.{i}.post_attention_norm.weight"] = t.ones
        if i < n_dense:
            t.dense_ffn(i, n_ff)
            continue
        p = f"blk.{i}."
        t.all |= {
            p + "ffn_gate_inp.weight": t.random(n_expert, n_embd),
            p + "exp_probs_b.bias": np.zeros(n_expert, np.float32),
            p + "ffn_gate_exps.weight": t.random(n_expert, n_ff_exp, n_embd),
            p + "ffn_up_exps.weight": t.random(n_expert, n_ff_exp, n_embd),
            p + "ffn_down_exps.weight": t.random(n_expert, n_embd, n_ff_exp),
            p + "ffn_gate_shexp.weight": t.random(n_ff_exp, n_embd),
            p + "ffn_up_shexp.weight": t.random(n_ff_exp, n_embd),
            p + "ffn_down_shexp.weight": t.random(n_embd, n_ff_exp),
        }
    t.nextn(n_layer)
    keys = {
        "key_length": head_dim, "value_length": head_dim, "rope_freq_base": 1000000.0,
        "expert_count": n_expert, "expert_used_count": n_expert_used, "expert_shared_count": 1,
        "expert_feed_forward_length": n_ff_exp, "leading_dense_block_count": n_dense,
        "expert_weights_scale": 1.0, "expert_weights_norm": True,
        "expert_gating_func": gguf.ExpertGatingFuncType.SIGMOID,  # as GLM-4.5
    }
    # GLM-4.5 rotates half of each head.
    return _write(Path(path), "glm4moe", vocab, t, n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv, n_ff=n_ff,
                  rope_dims=head_dim // 2, keys=keys)
