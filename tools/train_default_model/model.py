"""PyTorch twin of llama.cpp's dense hy_v3 graph (src/models/hy-v3.cpp) with one MTP head.

Trunk: token_embd -> n_layer x [x + attn(rms(x)); x + ffn(rms(x))] -> output_norm -> h
(post-norm hidden, what llama.cpp hands to the MTP head) -> tied LM head (token_embd^T).
Attention: separate q/k/v/o projections without bias, per-head RMS QK-norm over head_dim,
NEOX rope with n_rot == head_dim, softmax(q k^T / sqrt(head_dim)), causal.
FFN: down(silu(gate(x)) * up(x)).

MTP head (graph_mtp in hy-v3.cpp, driven by common/speculative.cpp draft-mtp):
at position p the head consumes the token x_p and the trunk's post-norm hidden
state h_{p-1} (zeros at p = 0), x = eh_proj(concat(enorm(emb(x_p)), hnorm(h_{p-1}))),
runs one full hy_v3 decoder block (causal attention over the head's own KV), applies
shared_head_norm, and predicts x_{p+1} with the shared (tied) LM head. When drafting
more than one token llama.cpp feeds the head's own post-shared_head_norm output g_p
as the hidden input of the next draft step at p+1 (token = the drafted x_{p+1}), whose
attention sees the head KV of true pairs up to p plus the earlier draft steps.
``MtpLM.head_steps`` reproduces that for S draft steps in parallel with teacher forcing.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn


@dataclasses.dataclass
class ModelConfig:
    n_vocab: int = 4096
    n_embd: int = 384
    n_layer: int = 6
    n_head: int = 6
    n_head_kv: int = 6
    n_ff: int = 1024
    rms_norm_eps: float = 1e-6
    rope_freq_base: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # ggml_rms_norm in f32: x / sqrt(mean(x^2) + eps), then * weight
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).to(x.dtype)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """NEOX rope tables for integer positions: theta_i = pos * base^(-2i/head_dim)."""
    half = head_dim // 2
    inv = base ** (-torch.arange(0, half, dtype=torch.float64) * 2.0 / head_dim)
    ang = positions.to(torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang).float(), torch.sin(ang).float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: [B, H, T, D]; NEOX pairs element i with element i + D/2
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        hd = cfg.head_dim
        self.wq = nn.Linear(cfg.n_embd, cfg.n_head * hd, bias=False)
        self.wk = nn.Linear(cfg.n_embd, cfg.n_head_kv * hd, bias=False)
        self.wv = nn.Linear(cfg.n_embd, cfg.n_head_kv * hd, bias=False)
        self.wo = nn.Linear(cfg.n_head * hd, cfg.n_embd, bias=False)
        self.q_norm = RMSNorm(hd, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(hd, cfg.rms_norm_eps)

    def qkv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        b, t, _ = x.shape
        hd = self.cfg.head_dim
        q = self.q_norm(self.wq(x).view(b, t, self.cfg.n_head, hd)).transpose(1, 2)
        k = self.k_norm(self.wk(x).view(b, t, self.cfg.n_head_kv, hd)).transpose(1, 2)
        v = self.wv(x).view(b, t, self.cfg.n_head_kv, hd).transpose(1, 2)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def forward(self, x, cos, sin, prefix_kv=None, mask=None):
        """Causal attention; with ``prefix_kv`` ([(k, v), ...]) the keys are
        concat(prefix keys, own keys) and ``mask`` [T, T_all] (True = attend) applies."""
        b, t, _ = x.shape
        q, k, v = self.qkv(x, cos, sin)
        rep = self.cfg.n_head // self.cfg.n_head_kv
        if prefix_kv:
            kk = torch.cat([pk for pk, _ in prefix_kv] + [k], dim=2)
            vv = torch.cat([pv for _, pv in prefix_kv] + [v], dim=2)
        else:
            kk, vv = k, v
        if rep > 1:
            kk = kk.repeat_interleave(rep, dim=1)
            vv = vv.repeat_interleave(rep, dim=1)
        if prefix_kv:
            # explicit masked softmax (SDPA's masked CPU path is slow under bf16 autocast)
            att = (q @ kk.transpose(-1, -2)).float() * (1.0 / math.sqrt(self.cfg.head_dim))
            att = att.masked_fill(~mask, float("-inf")).softmax(-1)
            out = att.to(vv.dtype) @ vv
        else:
            out = F.scaled_dot_product_attention(q, kk, vv, is_causal=True)
        out = out.transpose(1, 2).reshape(b, t, -1)
        return self.wo(out), (k, v)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.n_embd, cfg.rms_norm_eps)
        self.attn = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.n_embd, cfg.rms_norm_eps)
        self.ffn_gate = nn.Linear(cfg.n_embd, cfg.n_ff, bias=False)
        self.ffn_up = nn.Linear(cfg.n_embd, cfg.n_ff, bias=False)
        self.ffn_down = nn.Linear(cfg.n_ff, cfg.n_embd, bias=False)

    def forward(self, x, cos, sin, prefix_kv=None, mask=None):
        a, kv = self.attn(self.attn_norm(x), cos, sin, prefix_kv, mask)
        h = x + a
        f = self.ffn_norm(h)
        return h + self.ffn_down(F.silu(self.ffn_gate(f)) * self.ffn_up(f)), kv


class MtpHead(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.enorm = RMSNorm(cfg.n_embd, cfg.rms_norm_eps)
        self.hnorm = RMSNorm(cfg.n_embd, cfg.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * cfg.n_embd, cfg.n_embd, bias=False)
        self.block = Block(cfg)
        self.shared_head_norm = RMSNorm(cfg.n_embd, cfg.rms_norm_eps)


def step_mask(t: int, step: int, device=None) -> torch.Tensor:
    """Attention mask of draft step ``step`` (1-based) for queries at positions 0..t-1.

    Keys are [K_1 | K_2 | ... | K_step], each t long, K_k[j] = the head's KV at position j
    written by draft step k. Step s at position i sees K_1[j] for j <= i-s+1 (true pairs,
    written by process() and by the first draft step) and K_k[i-s+k] for k = 2..s.
    """
    i = torch.arange(t, device=device)[:, None]
    j = torch.arange(t, device=device)[None, :]
    parts = [j <= i - step + 1]
    for k in range(2, step + 1):
        parts.append(j == i - step + k)
    return torch.cat(parts, dim=1)


class MtpLM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_embd = nn.Embedding(cfg.n_vocab, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.output_norm = RMSNorm(cfg.n_embd, cfg.rms_norm_eps)
        self.mtp = MtpHead(cfg)
        self.reset_parameters()

    def reset_parameters(self, std: float = 0.02) -> None:
        for name, p in self.named_parameters():
            if p.ndim == 2:
                s = std
                if name.endswith("wo.weight") or name.endswith("ffn_down.weight"):
                    s = std / math.sqrt(2 * (self.cfg.n_layer + 1))
                nn.init.normal_(p, mean=0.0, std=s)

    def rope(self, t: int, device=None):
        return rope_cos_sin(torch.arange(t, device=device), self.cfg.head_dim, self.cfg.rope_freq_base)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return h @ self.tok_embd.weight.to(h.dtype).t()

    def trunk(self, tokens: torch.Tensor, cos=None, sin=None) -> torch.Tensor:
        """Post-output_norm hidden states h [B, T, E]."""
        if cos is None:
            cos, sin = self.rope(tokens.shape[1], tokens.device)
        x = self.tok_embd(tokens)
        for blk in self.blocks:
            x, _ = blk(x, cos, sin)
        return self.output_norm(x)

    def head_steps(self, tokens: torch.Tensor, h: torch.Tensor, steps: int, cos=None, sin=None):
        """Outputs g^s [B, T, E] (post shared_head_norm) of draft steps s = 1..steps.

        g^s at position i predicts tokens[i + 1]. Step 1 pairs tokens[i] with h[i-1]
        (zeros at i = 0); step s > 1 pairs tokens[i] with g^{s-1}[i-1] (teacher forcing:
        the drafted token equals the true one whenever it matters for acceptance).
        """
        b, t = tokens.shape
        if cos is None:
            cos, sin = self.rope(t, tokens.device)
        head = self.mtp
        e = head.enorm(self.tok_embd(tokens))
        outs = []
        kvs = []
        prev = h
        for s in range(1, steps + 1):
            shifted = torch.cat([torch.zeros_like(prev[:, :1]), prev[:, :-1]], dim=1)
            x = head.eh_proj(torch.cat([e, head.hnorm(shifted)], dim=-1))
            if s == 1:
                y, kv = head.block(x, cos, sin)
            else:
                mask = step_mask(t, s, tokens.device)
                y, kv = head.block(x, cos, sin, prefix_kv=kvs, mask=mask)
            kvs.append(kv)
            g = head.shared_head_norm(y)
            outs.append(g)
            prev = g
        return outs

    def forward(self, tokens: torch.Tensor, steps: int = 1):
        cos, sin = self.rope(tokens.shape[1], tokens.device)
        h = self.trunk(tokens, cos, sin)
        return h, self.head_steps(tokens, h, steps, cos, sin)


def gguf_tensors(model: MtpLM) -> dict[str, "numpy.ndarray"]:  # noqa: F821
    """GGUF-named tensors in PyTorch (out, in) layout (tied output: no output.weight)."""
    cfg = model.cfg
    sd = {k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items()}
    out = {"token_embd.weight": sd["tok_embd.weight"], "output_norm.weight": sd["output_norm.weight"]}

    def block(prefix: str, i: int) -> None:
        m = {
            "attn_norm.weight": "attn_norm.weight",
            "attn_q.weight": "attn.wq.weight",
            "attn_k.weight": "attn.wk.weight",
            "attn_v.weight": "attn.wv.weight",
            "attn_output.weight": "attn.wo.weight",
            "attn_q_norm.weight": "attn.q_norm.weight",
            "attn_k_norm.weight": "attn.k_norm.weight",
            "ffn_norm.weight": "ffn_norm.weight",
            "ffn_gate.weight": "ffn_gate.weight",
            "ffn_up.weight": "ffn_up.weight",
            "ffn_down.weight": "ffn_down.weight",
        }
        for g, p in m.items():
            out[f"blk.{i}.{g}"] = sd[f"{prefix}.{p}"]

    for i in range(cfg.n_layer):
        block(f"blocks.{i}", i)
    n = cfg.n_layer
    block("mtp.block", n)
    out[f"blk.{n}.nextn.eh_proj.weight"] = sd["mtp.eh_proj.weight"]
    out[f"blk.{n}.nextn.enorm.weight"] = sd["mtp.enorm.weight"]
    out[f"blk.{n}.nextn.hnorm.weight"] = sd["mtp.hnorm.weight"]
    out[f"blk.{n}.nextn.shared_head_norm.weight"] = sd["mtp.shared_head_norm.weight"]
    return out


def load_checkpoint(path, round_to_f16: bool = False) -> MtpLM:
    """Load ckpt.pt written by train.py into an fp32 eval-mode model.

    ``round_to_f16`` rounds every matrix through float16 (norm vectors stay f32), which is
    exactly what the f16 GGUF stores, so outputs can be compared with llama.cpp's.
    """
    ck = torch.load(path, map_location="cpu", weights_only=False)
    model = MtpLM(ModelConfig(**ck["config"]))
    model.load_state_dict(ck["model"])
    model.float().eval()
    if round_to_f16:
        with torch.no_grad():
            for p in model.parameters():
                if p.ndim == 2:
                    p.copy_(p.half().float())
    return model
