"""PyTorch twin of the llama MTP graph that patch 0005 adds (``llama_graph_mtp`` in the patched
``src/models/llama.cpp``), driven as ``common/speculative.cpp``'s draft-mtp drives it.

Row i of the head pairs token x_i with the trunk's post-final-norm hidden state h_{i-1} (zeros at
i = 0), at position i, and predicts x_{i+1}:

    x = eh_proj(concat(enorm(token_embd[x_i]), hnorm(h_{i-1})))
    y = llama block(x)       # rms attn_norm, q/k/v, NORM rope (GGUF row order), GQA, wo; rms ffn_norm, SwiGLU
    g = shared_head_norm(y)  # the state the next draft step receives
    logits = g @ token_embd^T  # tied: the trunk's own output matrix (frozen)

Weights are kept in GGUF layout (q/k rows permuted for NORM rope, i.e. rope rotates adjacent
pairs), so they are written back as they are trained. Draft step s > 1 pairs x_i with the
head's own g^{s-1}_{i-1} and attends the head KV that llama.cpp's draft context holds then
(``step_mask``, as in tools/train_default_model/model.py).

An experiment, not in patch 0005: ``Head(..., fuse=n)`` / ``Head.fused(n)`` gives step 1 more of the
trunk's state, EAGLE-3 style: the h it receives becomes

    h' = h + W @ concat(rms(l_1), .., rms(l_n))     # l_k = intermediate layers' residual-stream outputs (no weight)

i.e. fc([h, rms(l_1), .., rms(l_n)]) with fc = [I | W]: W (``nextn.fuse_fc.weight``, [576, n*576]) is learned and
starts at zero, so at step 0 the head computes exactly what it computed before, also under bf16 autocast; the
identity block is kept fixed because hnorm and eh_proj follow (a learned block there would only change what the RMS
norm sees). Steps s > 1 feed the head's own output as before. ``tensors()`` (export) leaves W out.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

N_EMBD = 576
N_HEAD = 9
N_HEAD_KV = 3
HEAD_DIM = 64
N_FF = 1536
EPS = 1e-5
ROPE_BASE = 100000.0


def rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * w


def rope_tables(t: int) -> tuple[torch.Tensor, torch.Tensor]:
    inv = ROPE_BASE ** (-torch.arange(0, HEAD_DIM // 2, dtype=torch.float64) * 2.0 / HEAD_DIM)
    ang = torch.arange(t, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang).float(), torch.sin(ang).float()


def rope_norm(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """ggml NORM rope: rotates (x[2i], x[2i+1]) by pos * base^(-2i/d). x: [B, H, T, D]."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    c, s = cos.to(x.dtype), sin.to(x.dtype)
    return torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1).flatten(-2)


def step_mask(t: int, step: int) -> torch.Tensor:
    i = torch.arange(t)[:, None]
    j = torch.arange(t)[None, :]
    parts = [j <= i - step + 1]
    for k in range(2, step + 1):
        parts.append(j == i - step + k)
    return torch.cat(parts, dim=1)


class Head(nn.Module):
    """The MTP block's trainable tensors, named as in the GGUF (``blk.30.`` + name, dots -> '__')."""

    NAMES = {
        "attn_norm.weight": (N_EMBD,),
        "attn_q.weight": (N_HEAD * HEAD_DIM, N_EMBD),
        "attn_k.weight": (N_HEAD_KV * HEAD_DIM, N_EMBD),
        "attn_v.weight": (N_HEAD_KV * HEAD_DIM, N_EMBD),
        "attn_output.weight": (N_EMBD, N_HEAD * HEAD_DIM),
        "ffn_norm.weight": (N_EMBD,),
        "ffn_gate.weight": (N_FF, N_EMBD),
        "ffn_up.weight": (N_FF, N_EMBD),
        "ffn_down.weight": (N_EMBD, N_FF),
        "nextn.eh_proj.weight": (N_EMBD, 2 * N_EMBD),
        "nextn.enorm.weight": (N_EMBD,),
        "nextn.hnorm.weight": (N_EMBD,),
        "nextn.shared_head_norm.weight": (N_EMBD,),
    }

    FUSE = "nextn.fuse_fc.weight"

    def __init__(self, init: dict[str, np.ndarray], n_ff: int | None = None, fuse: int | None = None):
        """``n_ff``: the FFN width; default: what ``init`` holds (``N_FF`` for the shipped head).
        ``fuse``: number of intermediate trunk layers fused into step 1's h; default: what ``init``
        holds (0 for the shipped head); a new W starts at zero."""
        super().__init__()
        if n_ff is None:
            n_ff = int(np.asarray(init["ffn_gate.weight"]).size) // N_EMBD
        self.n_ff = n_ff
        self.p = nn.ParameterDict({
            k.replace(".", "__"): nn.Parameter(torch.tensor(np.asarray(init[k]), dtype=torch.float32).reshape(
                tuple(n_ff if d == N_FF else d for d in shape)))
            for k, shape in self.NAMES.items()
        })
        if fuse is None:
            fuse = int(np.asarray(init[self.FUSE]).shape[1]) // N_EMBD if self.FUSE in init else 0
        self.fuse = fuse
        if fuse:
            w = np.asarray(init[self.FUSE]) if self.FUSE in init else np.zeros((N_EMBD, fuse * N_EMBD), np.float32)
            self.p[self.FUSE.replace(".", "__")] = nn.Parameter(
                torch.tensor(w, dtype=torch.float32).reshape(N_EMBD, fuse * N_EMBD))

    @classmethod
    def from_state(cls, state: dict[str, torch.Tensor]) -> "Head":
        """A head shaped as a checkpoint's ``state_dict`` (any ``n_ff``), holding its weights."""
        init = {k.split(".", 1)[1].replace("__", "."): v.detach().float().cpu().numpy() for k, v in state.items()}
        head = cls(init)
        head.load_state_dict(state)
        return head

    def widened(self, n_ff: int, seed: int = 0, scale: float = 1.0) -> "Head":
        """A copy with ``n_ff`` FFN units that computes exactly what this head computes: the old
        gate/up rows and down columns copied, new gate/up rows random (``scale`` x the std of the old rows),
        new down columns zero."""
        old = self.tensors()
        k = old["ffn_gate.weight"].shape[0]
        assert n_ff > k, (n_ff, k)
        rng = np.random.default_rng(seed)
        new = dict(old)
        for name in ("ffn_gate.weight", "ffn_up.weight"):
            w = old[name]
            extra = rng.standard_normal((n_ff - k, N_EMBD)).astype(np.float32) * float(w.std()) * scale
            new[name] = np.concatenate([w, extra], axis=0)
        new["ffn_down.weight"] = np.concatenate([old["ffn_down.weight"], np.zeros((N_EMBD, n_ff - k), np.float32)], 1)
        return Head(new, n_ff)

    def fused(self, n: int) -> "Head":
        """A copy that also takes ``n`` intermediate trunk layers at step 1, W = 0: the same function."""
        assert self.fuse == 0
        return Head(self.tensors(), self.n_ff, fuse=n)

    def w(self, name: str) -> torch.Tensor:
        return self.p[name.replace(".", "__")]

    def tensors(self) -> dict[str, np.ndarray]:
        return {k: self.w(k).detach().float().cpu().numpy() for k in self.NAMES}

    def block(self, x, cos, sin, prefix_kv=None, mask=None):
        b, t, _ = x.shape
        a = rms(x, self.w("attn_norm.weight"))
        q = (a @ self.w("attn_q.weight").t()).view(b, t, N_HEAD, HEAD_DIM).transpose(1, 2)
        k = (a @ self.w("attn_k.weight").t()).view(b, t, N_HEAD_KV, HEAD_DIM).transpose(1, 2)
        v = (a @ self.w("attn_v.weight").t()).view(b, t, N_HEAD_KV, HEAD_DIM).transpose(1, 2)
        q, k = rope_norm(q, cos, sin), rope_norm(k, cos, sin)
        if prefix_kv:
            kk = torch.cat([pk for pk, _ in prefix_kv] + [k], dim=2)
            vv = torch.cat([pv for _, pv in prefix_kv] + [v], dim=2)
        else:
            kk, vv = k, v
        rep = N_HEAD // N_HEAD_KV
        kk = kk.repeat_interleave(rep, dim=1)
        vv = vv.repeat_interleave(rep, dim=1)
        if prefix_kv:
            att = (q @ kk.transpose(-1, -2)).float() * (1.0 / math.sqrt(HEAD_DIM))
            att = att.masked_fill(~mask, float("-inf")).softmax(-1)
            out = att.to(vv.dtype) @ vv
        else:
            out = F.scaled_dot_product_attention(q, kk, vv, is_causal=True)
        out = out.transpose(1, 2).reshape(b, t, -1) @ self.w("attn_output.weight").t()
        hmid = x + out
        f = rms(hmid, self.w("ffn_norm.weight"))
        ffn = (F.silu(f @ self.w("ffn_gate.weight").t()) * (f @ self.w("ffn_up.weight").t())) @ self.w("ffn_down.weight").t()
        return hmid + ffn, (k, v)

    def steps(self, emb: torch.Tensor, h: torch.Tensor, n_steps: int,
              extra: torch.Tensor | None = None) -> list[torch.Tensor]:
        """g^s [B, T, E] for draft steps s = 1..n_steps. ``emb`` = token_embd[x] [B, T, E],
        ``h`` = trunk hidden [B, T, E] (row i of the head uses h[i-1]); ``extra`` [B, T, n, E] (a head
        with ``fuse`` = n): those positions' intermediate-layer states, fused into step 1's h."""
        b, t, _ = emb.shape
        cos, sin = rope_tables(t)
        e = rms(emb, self.w("nextn.enorm.weight"))
        outs: list[torch.Tensor] = []
        kvs: list[Any] = []
        prev = h
        if self.fuse:
            assert extra is not None and extra.shape[2] == self.fuse, "a fused head needs its intermediate layers"
            xf = extra.float()
            xf = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).reshape(b, t, -1)
            prev = h + xf @ self.w(self.FUSE).t()
        for s in range(1, n_steps + 1):
            shifted = torch.cat([torch.zeros_like(prev[:, :1]), prev[:, :-1]], dim=1)
            x = torch.cat([e, rms(shifted, self.w("nextn.hnorm.weight"))], dim=-1) @ self.w("nextn.eh_proj.weight").t()
            if s == 1:
                y, kv = self.block(x, cos, sin)
            else:
                y, kv = self.block(x, cos, sin, prefix_kv=kvs, mask=step_mask(t, s))
            kvs.append(kv)
            g = rms(y, self.w("nextn.shared_head_norm.weight"))
            outs.append(g)
            prev = g
        return outs
