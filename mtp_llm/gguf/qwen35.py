"""Write tiny hybrid qwen35 GGUF files with an MTP (nextn) head.

qwen35 (Qwen3.5 dense) is a hybrid model: most trunk blocks are Gated
DeltaNet (linear attention with a recurrent state), every
``full_attention_interval``-th block is gated full attention (a joint
query + gate projection, QK-norm, interleaved M-RoPE). Each block has an
``attn_norm`` before the mixer and a ``post_attention_norm`` before the SwiGLU
FFN. The MTP head is one extra full-attention block at the end, fed by
``nextn.eh_proj`` over [enorm(embedding), hnorm(hidden)].

The recurrent state makes it the test bed for the engine's two rollback
modes: recurrent-state snapshots (``n_rs_seq > 0``) and checkpoint
save/restore. Shapes and key types follow llama.cpp's
``src/models/qwen35.cpp`` (tensors are given here in PyTorch
``(out_features, in_features)`` layout; the writer stores them as ggml expects).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from .common import (
    BpeVocab,
    Shapes,
    add_bpe_vocab,
    finish_file,
    model_shapes,
    nextn_shapes,
    start_file,
    tiny_vocab,
)

ARCH = "qwen35"


@dataclasses.dataclass(frozen=True)
class Qwen35Config:
    """Shape of a dense qwen35 model and its MTP heads. llama.cpp's qwen35 MTP graph runs
    exactly one head: a file with more decodes plainly and cannot draft (the engine says so)."""

    n_vocab: int
    n_embd: int = 64
    n_layer: int = 4
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 16
    n_ff: int = 128
    full_attention_interval: int = 2
    ssm_d_conv: int = 4
    ssm_d_state: int = 16  # head dim of the linear-attention keys and values
    ssm_n_group: int = 2  # linear-attention key heads
    ssm_dt_rank: int = 4  # linear-attention value heads
    n_nextn: int = 1
    n_ctx_train: int = 4096
    rope_freq_base: float = 10000000.0
    rms_norm_eps: float = 1e-6
    name: str = "mtp-llm-tiny-hybrid"

    @property
    def rope_sections(self) -> tuple[int, int, int, int]:
        """Interleaved M-RoPE sections (t, h, w, -) over all head_dim / 2 rotary pairs,
        split like Qwen3.5's [11, 11, 10, 0]; text positions make them plain rope."""
        pairs = self.head_dim // 2
        return ((pairs + 2) // 3, (pairs + 1) // 3, pairs // 3, 0)

    @property
    def ssm_d_inner(self) -> int:
        return self.ssm_d_state * self.ssm_dt_rank

    @property
    def conv_dim(self) -> int:
        return 2 * self.ssm_d_state * self.ssm_n_group + self.ssm_d_inner

    def is_recurrent(self, il: int) -> bool:
        """llama.cpp's rule when ``attention.recurrent_layers`` is absent."""
        return il < self.n_layer and (il + 1) % self.full_attention_interval != 0

    def _common_shapes(self) -> Shapes:
        e = self.n_embd
        return {
            "attn_norm.weight": (e,),
            "post_attention_norm.weight": (e,),
            "ffn_gate.weight": (self.n_ff, e),
            "ffn_up.weight": (self.n_ff, e),
            "ffn_down.weight": (e, self.n_ff),
        }

    def attention_shapes(self) -> Shapes:
        e, hd = self.n_embd, self.head_dim
        return {
            **self._common_shapes(),
            "attn_q.weight": (2 * self.n_head * hd, e),  # query and output gate, interleaved per head
            "attn_k.weight": (self.n_head_kv * hd, e),
            "attn_v.weight": (self.n_head_kv * hd, e),
            "attn_output.weight": (e, self.n_head * hd),
            "attn_q_norm.weight": (hd,),
            "attn_k_norm.weight": (hd,),
        }

    def delta_net_shapes(self) -> Shapes:
        e, v_heads = self.n_embd, self.ssm_dt_rank
        return {
            **self._common_shapes(),
            "attn_qkv.weight": (self.conv_dim, e),
            "attn_gate.weight": (self.ssm_d_inner, e),
            "ssm_conv1d.weight": (self.conv_dim, self.ssm_d_conv),
            "ssm_dt.bias": (v_heads,),
            "ssm_a": (v_heads,),
            "ssm_beta.weight": (v_heads, e),
            "ssm_alpha.weight": (v_heads, e),
            "ssm_norm.weight": (self.ssm_d_state,),
            "ssm_out.weight": (e, self.ssm_d_inner),
        }

    def tensor_shapes(self) -> Shapes:
        """Every tensor of the embedded model with a tied output head (an untied
        ``output.weight`` of shape (n_vocab, n_embd) may be added)."""
        blocks = [
            (i, self.delta_net_shapes() if self.is_recurrent(i) else self.attention_shapes())
            for i in range(self.n_layer)
        ]
        head = self.attention_shapes() | nextn_shapes(self.n_embd)
        blocks += [(i, head) for i in range(self.n_layer, self.n_layer + self.n_nextn)]
        return model_shapes(self.n_vocab, self.n_embd, blocks)


def random_qwen35_tensors(
    config: Qwen35Config, seed: int, *, successor_scale: float | None = None
) -> dict[str, np.ndarray]:
    """Random weights of roughly the scale of a trained model.

    With ``successor_scale`` set, the weights get a structure that makes the
    MTP head right part of the time: the untied output head is the token
    embedding turned by a random rotation, so a bare trunk would always emit a
    fixed "successor" of the current token; every block's output projection
    is scaled by ``successor_scale``, so the Gated DeltaNet and attention
    blocks (and thus the recurrent state and the history) perturb that choice;
    the head is an exact copy of the bare successor map. Its drafts are then
    accepted while the perturbation does not flip the target's choice: a larger
    scale means lower acceptance.
    """
    rng = np.random.default_rng(seed)
    tensors: dict[str, np.ndarray] = {}
    for name, shape in config.tensor_shapes().items():
        if name.endswith("norm.weight"):
            value = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name == "token_embd.weight":
            value = rng.standard_normal(shape)
        elif name.endswith(".ssm_a"):  # -exp(A_log): a negative decay rate per value head
            value = -np.exp(rng.uniform(-1.0, 0.5, shape))
        elif name.endswith(".ssm_dt.bias"):
            value = 0.5 * rng.standard_normal(shape)
        else:
            value = rng.standard_normal(shape) * 1.5 / np.sqrt(shape[1])
        tensors[name] = value.astype(np.float32)
    if successor_scale is None:
        return tensors

    e = config.n_embd
    rotation, _ = np.linalg.qr(rng.standard_normal((e, e)))
    tensors["output.weight"] = (tensors["token_embd.weight"] @ rotation).astype(np.float32)
    tensors["output_norm.weight"][:] = 1.0
    for name in tensors:
        if name.endswith(("ssm_out.weight", "attn_output.weight", "ffn_down.weight")):
            tensors[name] *= np.float32(successor_scale)
    head = f"blk.{config.n_layer}."
    for name in tensors:
        if name.startswith(head) and name.endswith("norm.weight"):
            tensors[name][:] = 1.0
    # The head's block adds nothing; eh_proj passes the normalised embedding of
    # the token it is given, so it predicts that token's successor.
    tensors[head + "attn_output.weight"][:] = 0.0
    tensors[head + "ffn_down.weight"][:] = 0.0
    eh = np.zeros((e, 2 * e), dtype=np.float32)
    eh[:, :e] = np.eye(e, dtype=np.float32)
    tensors[head + "nextn.eh_proj.weight"] = eh
    return tensors


def write_qwen35_tensors(
    path: str | Path,
    config: Qwen35Config,
    tensors: Mapping[str, np.ndarray],
    vocab: BpeVocab,
    *,
    chat_template: str | None = None,
) -> Path:
    """Write ``tensors`` (all f32) as an embedded qwen35 GGUF."""
    if config.n_vocab != len(vocab.tokens):
        raise ValueError(f"n_vocab {config.n_vocab} != vocabulary size {len(vocab.tokens)}")
    if config.head_dim % 2:
        raise ValueError("head_dim must be even")
    if config.ssm_dt_rank % config.ssm_n_group:
        raise ValueError("ssm_dt_rank (value heads) must be a multiple of ssm_n_group (key heads)")
    path = Path(path)
    writer = start_file(path, ARCH, config, tensors, file_type=0)  # all f32
    writer.add_head_count(config.n_head)
    writer.add_head_count_kv(config.n_head_kv)
    writer.add_key_length(config.head_dim)
    writer.add_value_length(config.head_dim)
    writer.add_rope_dimension_count(config.head_dim)
    writer.add_rope_dimension_sections(list(config.rope_sections))
    writer.add_rope_freq_base(config.rope_freq_base)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_full_attention_interval(config.full_attention_interval)
    writer.add_ssm_conv_kernel(config.ssm_d_conv)
    writer.add_ssm_inner_size(config.ssm_d_inner)
    writer.add_ssm_state_size(config.ssm_d_state)
    writer.add_ssm_time_step_rank(config.ssm_dt_rank)
    writer.add_ssm_group_count(config.ssm_n_group)
    add_bpe_vocab(writer, vocab, chat_template)

    for name, array in tensors.items():
        writer.add_tensor(name, np.ascontiguousarray(array, dtype=np.float32))

    finish_file(writer)
    return path


def write_qwen35(
    path: str | Path,
    *,
    seed: int,
    n_embd: int = 64,
    n_layer: int = 4,
    n_head: int = 4,
    n_head_kv: int = 2,
    head_dim: int = 16,
    n_ff: int = 128,
    full_attention_interval: int = 2,
    successor_scale: float | None = None,
    vocab: BpeVocab | None = None,
    name: str = "mtp-llm-tiny-hybrid",
) -> Path:
    """Write a random-weight f32 qwen35 model (``n_layer`` trunk blocks plus one
    MTP head) with ``vocab`` (default: the tiny byte-level vocabulary); return ``path``.

    With the defaults, blocks 0 and 2 are Gated DeltaNet, 1 and 3 full attention.
    Fully random weights make the head almost never right; ``successor_scale``
    gives partial acceptance (see :func:`random_qwen35_tensors`).
    """
    if vocab is None:
        vocab = tiny_vocab()
    config = Qwen35Config(
        n_vocab=len(vocab.tokens),
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim=head_dim,
        n_ff=n_ff,
        full_attention_interval=full_attention_interval,
        name=name,
    )
    tensors = random_qwen35_tensors(config, seed, successor_scale=successor_scale)
    return write_qwen35_tensors(path, config, tensors, vocab)
