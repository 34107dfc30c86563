"""Estimate MTP acceptance of the trained model in PyTorch (greedy decoding, held-out prompts).

Runs the model as exported (matrices rounded to f16, fp32 math). For each prompt the trunk
generates a greedy continuation; then llama.cpp's draft-mtp loop is simulated on it: with
id_last at position p0 the head drafts step 1 from (id_last, h[p0-1]), step k > 1 from
(draft k-1, head output of step k-1), the target accepts the longest matching prefix and
emits one more token (its own greedy token), and the next round starts after it.
Because the drafts only matter while they match the target's tokens, the teacher-forced
parallel pass of MtpLM.head_steps gives exactly the drafts llama.cpp would make.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import DEFAULT_WORK_DIR  # noqa: E402
from model import load_checkpoint  # noqa: E402


def held_out_prompts(work_dir: Path, n: int, prompt_len: int, seed: int) -> list[list[int]]:
    held = np.fromfile(work_dir / "heldout.bin", dtype=np.uint16).astype(np.int64)
    rng = np.random.default_rng(seed)
    starts = np.sort(rng.choice(held.size - prompt_len - 1, size=n, replace=False))
    return [held[s:s + prompt_len].tolist() for s in starts]


@torch.no_grad()
def greedy(model, prompts: list[list[int]], n_gen: int, eos: int) -> list[list[int]]:
    seqs = torch.tensor(prompts)
    for _ in range(n_gen):
        h = model.trunk(seqs)
        nxt = model.logits(h[:, -1]).argmax(-1, keepdim=True)
        seqs = torch.cat([seqs, nxt], dim=1)
    out = []
    for row, p in zip(seqs.tolist(), prompts):
        gen = row[len(p):]
        if eos in gen:
            gen = gen[:gen.index(eos) + 1]
        out.append(p + gen)
    return out


@torch.no_grad()
def simulate(model, seq: list[int], prompt_len: int, n_draft: int) -> tuple[int, int, int]:
    """Returns (verifies, drafts proposed, drafts accepted) for one greedy sequence."""
    x = torch.tensor([seq])
    h, gs = model(x, n_draft)
    drafts = [model.logits(g[0]).argmax(-1).tolist() for g in gs]  # drafts[k][p] predicts seq[p+1]
    p0 = prompt_len  # position of id_last when the first draft is made
    verifies = proposed = accepted = 0
    end = len(seq) - 1  # last position whose successor is known
    while p0 + n_draft <= end:
        a = 0
        while a < n_draft and drafts[a][p0 + a] == seq[p0 + a + 1]:
            a += 1
        verifies += 1
        proposed += n_draft
        accepted += a
        p0 += a + 1
    return verifies, proposed, accepted


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR)
    ap.add_argument("--ckpt", type=Path, default=None)
    ap.add_argument("--prompts", type=int, default=24)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--n-gen", type=int, default=128)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = load_checkpoint(args.ckpt or args.work_dir / "ckpt.pt", round_to_f16=True)
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(args.work_dir / "tokenizer.json"))
    eos = tok.token_to_id("<|endoftext|>")

    prompts = held_out_prompts(args.work_dir, args.prompts, args.prompt_len, args.seed)
    seqs = greedy(model, prompts, args.n_gen, eos)
    result = {"prompts": args.prompts, "prompt_len": args.prompt_len, "n_gen": args.n_gen,
              "prompt_source": "held-out split, seeded offsets", "n_draft": {}}
    # fraction of all generated positions where the step-1 draft equals the target's next token
    hits = total = 0
    for s in seqs:
        h, gs = model(torch.tensor([s]), 1)
        d = model.logits(gs[0][0]).argmax(-1).tolist()
        for p in range(args.prompt_len, len(s) - 1):
            hits += d[p] == s[p + 1]
            total += 1
    result["step1_match_all_positions"] = round(hits / total, 4)
    for n_draft in (1, 2, 3, 4):
        v = pr = ac = 0
        for s in seqs:
            a, b, c = simulate(model, s, args.prompt_len, n_draft)
            v, pr, ac = v + a, pr + b, ac + c
        result["n_draft"][str(n_draft)] = {
            "verifies": v,
            "acceptance_rate": round(ac / pr, 4),
            "mean_accepted_drafts_per_verify": round(ac / v, 4),
            "mean_tokens_per_verify": round((ac + v) / v, 4),
        }
    result["sample"] = tok.decode(seqs[0])
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
