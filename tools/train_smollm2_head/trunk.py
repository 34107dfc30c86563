"""PyTorch twin of llama.cpp's llama trunk for the source GGUF (weights dequantized with gguf-py).

Used to make self-distillation data fast on a CPU: batched greedy generation with a KV cache
(fp32, left-padded prompts) that also yields the post-final-norm hidden state of every position,
the state llama.cpp's llama graph hands the MTP head (``t_h_nextn``, patch 0005). ``check`` compares
it with llama.cpp (``mtp_llm.parity.forward_with_head``) on a chat sequence.

    nice -n 19 .venv/bin/python tools/train_smollm2_head/trunk.py check
    nice -n 19 .venv/bin/python tools/train_smollm2_head/trunk.py gen --limit 3000 --batch 48
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_data import DEFAULT_WORK, hidden_dir  # noqa: E402
from head_model import EPS, HEAD_DIM, N_HEAD, N_HEAD_KV, ROPE_BASE  # noqa: E402
from prompts import train_prompts  # noqa: E402

N_LAYER = 30


def load_weights(path: Path) -> dict[str, torch.Tensor]:
    import gguf

    reader = gguf.GGUFReader(str(path))
    out = {}
    for t in reader.tensors:
        arr = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32)
        out[t.name] = torch.from_numpy(arr.reshape(arr.shape[0], -1) if arr.ndim > 1 else arr)
    return out


def rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def rope(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """NORM rope (adjacent pairs) at per-row positions. x [B, H, T, D], pos [B, T]."""
    inv = ROPE_BASE ** (-torch.arange(0, HEAD_DIM // 2, dtype=torch.float64) * 2.0 / HEAD_DIM)
    ang = pos.to(torch.float64)[..., None] * inv  # [B, T, D/2]
    c, s = torch.cos(ang).float()[:, None], torch.sin(ang).float()[:, None]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1).flatten(-2)


class Trunk:
    def __init__(self, w: dict[str, torch.Tensor]):
        self.w = w
        self.E = w["token_embd.weight"]

    def forward(self, tokens, pos, key_ok, cache=None, keep=None):
        """tokens/pos [B, T]; key_ok [B, S] (S = cached + T: keys that are real tokens).
        Returns post-norm h [B, T, E] and the updated cache (list of (K, V) per layer).
        ``keep``: a dict whose keys are 0-based layer indices; each gets that layer's residual-stream
        output [B, T, E] (llama.cpp's ``l_out-IL``, before output_norm)."""
        b, t = tokens.shape
        x = self.E[tokens]
        new_cache = []
        rep = N_HEAD // N_HEAD_KV
        s = key_ok.shape[1]
        q_pos = torch.arange(s - t, s)
        causal = torch.arange(s)[None, :] <= q_pos[:, None]  # [T, S]
        own = torch.arange(s)[None, :] == q_pos[:, None]  # a padding query sees itself: no NaN rows
        mask = causal[None, None] & (key_ok[:, None, None, :] | own[None, None])  # [B, 1, T, S]
        for i in range(N_LAYER):
            p = f"blk.{i}."
            a = rms(x, self.w[p + "attn_norm.weight"])
            q = (a @ self.w[p + "attn_q.weight"].t()).view(b, t, N_HEAD, HEAD_DIM).transpose(1, 2)
            k = (a @ self.w[p + "attn_k.weight"].t()).view(b, t, N_HEAD_KV, HEAD_DIM).transpose(1, 2)
            v = (a @ self.w[p + "attn_v.weight"].t()).view(b, t, N_HEAD_KV, HEAD_DIM).transpose(1, 2)
            q, k = rope(q, pos), rope(k, pos)
            if cache is not None:
                k = torch.cat([cache[i][0], k], dim=2)
                v = torch.cat([cache[i][1], v], dim=2)
            new_cache.append((k, v))
            kk = k.repeat_interleave(rep, dim=1)
            vv = v.repeat_interleave(rep, dim=1)
            out = torch.nn.functional.scaled_dot_product_attention(q, kk, vv, attn_mask=mask)
            x = x + out.transpose(1, 2).reshape(b, t, -1) @ self.w[p + "attn_output.weight"].t()
            f = rms(x, self.w[p + "ffn_norm.weight"])
            g = torch.nn.functional.silu(f @ self.w[p + "ffn_gate.weight"].t()) * (f @ self.w[p + "ffn_up.weight"].t())
            x = x + g @ self.w[p + "ffn_down.weight"].t()
            if keep is not None and i in keep:
                keep[i] = x
        return rms(x, self.w["output_norm.weight"]), new_cache

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return h @ self.E.t()

    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], max_new: int, eos: int):
        """Greedy answers; returns per prompt (tokens, hidden [len(tokens), E]) with tokens = prompt + answer."""
        b = len(prompts)
        lp = max(len(p) for p in prompts)
        pad = [lp - len(p) for p in prompts]
        toks = torch.zeros(b, lp, dtype=torch.long)
        for r, p in enumerate(prompts):
            toks[r, pad[r]:] = torch.tensor(p)
        pad_t = torch.tensor(pad)
        pos = (torch.arange(lp)[None, :] - pad_t[:, None]).clamp(min=0)
        key_ok = torch.arange(lp)[None, :] >= pad_t[:, None]
        h, cache = self.forward(toks, pos, key_ok)
        hs = [h]
        nxt = self.logits(h[:, -1]).argmax(-1)
        gen = [nxt]
        done = nxt == eos
        cur_pos = pos[:, -1]
        for _ in range(max_new - 1):
            if bool(done.all()):
                break
            cur_pos = cur_pos + 1
            key_ok = torch.cat([key_ok, torch.ones(b, 1, dtype=torch.bool)], dim=1)
            h, cache = self.forward(nxt[:, None], cur_pos[:, None], key_ok, cache)
            hs.append(h)
            nxt = self.logits(h[:, -1]).argmax(-1)
            gen.append(nxt)
            done = done | (nxt == eos)
        hidden = torch.cat(hs, dim=1)  # [B, lp + steps - 1]: h of each input position
        gen_t = torch.stack(gen, dim=1)  # [B, steps]
        out = []
        for r in range(b):
            ans = gen_t[r].tolist()
            if eos in ans:
                ans = ans[: ans.index(eos) + 1]
            seq = prompts[r] + ans
            # h for positions 0 .. len(seq)-2 (the last token needs none): prompt then answer inputs
            hid = hidden[r, pad[r] : pad[r] + len(seq) - 1]
            hid = torch.cat([hid, torch.zeros(1, hid.shape[1])])  # placeholder row for the last token
            out.append((seq, hid.numpy().astype(np.float16)))
        return out


def check(args) -> None:
    from mtp_llm import Model
    from mtp_llm.parity import forward_with_head
    from mtp_llm.smollm2 import converted_path, source_path

    trunk = Trunk(load_weights(source_path()))
    model = Model.load(converted_path(None))
    text = model.apply_chat_template([("user", "Could you tell me about the moon?")])
    toks = model.tokenize(text) + model.tokenize("The moon is Earth's only natural satellite. It", add_special=False)
    ref = forward_with_head(model, toks, n_threads=args.threads)
    with torch.inference_mode():
        t = torch.tensor([toks])
        h, _ = trunk.forward(t, torch.arange(len(toks))[None], torch.ones(1, len(toks), dtype=torch.bool))
        lg = trunk.logits(h)[0].numpy()
    print(f"{len(toks)} tokens: max |logit diff| {np.abs(lg - ref['trunk_logits']).max():.4f}, "
          f"max |h diff| {np.abs(h[0].numpy() - ref['trunk_hidden']).max():.4f}, "
          f"argmax agreement {(lg.argmax(-1) == ref['trunk_logits'].argmax(-1)).mean():.3f}")
    # greedy generation against the engine
    from mtp_llm import MTP

    s = MTP(model, draft_model=None, n_draft=0, n_threads=args.threads, flash_attn=True)
    qs = ["Explain photosynthesis in simple terms.", "Write a short poem about the sea.", "Why is the sky blue?"]
    ps = [model.tokenize(model.apply_chat_template([("user", q)])) for q in qs]
    t0 = time.time()
    res = trunk.generate(ps, 64, eos=2)
    print(f"torch generate: {time.time() - t0:.1f} s")
    for p, (seq, _) in zip(ps, res):
        eng = [e.id for e in s.stream_events(p, max_tokens=64, temp=0) if type(e).__name__ == "TokenEvent"]
        ours = seq[len(p):]
        same = next((i for i, (a, b) in enumerate(zip(eng, ours)) if a != b), min(len(eng), len(ours)))
        print(f"engine vs torch greedy: identical for the first {same} of {len(eng)} tokens")


def gen(args) -> None:
    from mtp_llm import Model
    from mtp_llm.smollm2 import source_path

    work = args.work_dir
    hdir = hidden_dir(work)
    hdir.mkdir(parents=True, exist_ok=True)
    state = work / "torch_gen.json"
    start = json.loads(state.read_text())["next"] if state.exists() else args.start
    model = Model.load(source_path(), load_mtp=False)
    trunk = Trunk(load_weights(source_path()))
    prompts = train_prompts()[: args.limit]
    shard = len(list(hdir.glob("shard-*.npz")))
    t0 = time.time()
    n_tok = 0
    for a in range(start, len(prompts), args.batch):
        chunk = prompts[a : a + args.batch]
        ps = [model.tokenize(model.apply_chat_template([("user", q)])) for q in chunk]
        # sort by length so that padding stays small
        res = trunk.generate(ps, args.max_new, eos=model.token_eos)
        tokens, offsets, n_prompt, hidden = [], [0], [], []
        for p, (seq, hid) in zip(ps, res):
            tokens.extend(seq)
            offsets.append(len(tokens))
            n_prompt.append(len(p))
            hidden.append(hid)
            n_tok += len(seq) - len(p)
        path = hdir / f"shard-{shard:05d}.npz"
        tmp = hdir / f"tmp-{shard:05d}.npz"
        np.savez(tmp, tokens=np.array(tokens, np.int32), offsets=np.array(offsets, np.int64),
                 n_prompt=np.array(n_prompt, np.int32), hidden=np.concatenate(hidden))
        tmp.replace(path)
        shard += 1
        state.write_text(json.dumps({"next": a + args.batch}))
        print(f"{time.strftime('%H:%M:%S')} prompts {a + len(chunk)}, {n_tok} answer tokens, "
              f"{n_tok / (time.time() - t0):.1f} tok/s", flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=("check", "gen"))
    ap.add_argument("--work-dir", type=Path, default=DEFAULT_WORK)
    ap.add_argument("--limit", type=int, default=3000)
    ap.add_argument("--start", type=int, default=0, help="first prompt index (default 0; resumes from torch_gen.json)")
    ap.add_argument("--batch", type=int, default=48)
    ap.add_argument("--max-new", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    check(args) if args.cmd == "check" else gen(args)


if __name__ == "__main__":
    main()
