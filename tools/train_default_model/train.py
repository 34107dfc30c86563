"""Train the Shakespeare test model (mtp-llm-default.gguf): a small hy_v3 trunk plus its MTP head, jointly.

loss = CE(trunk) + sum_s w_s * CE(MTP draft step s), s = 1..--mtp-steps, where step 1
is the head fed the trunk's hidden state and step s > 1 is the head fed its own previous
output (the recursion llama.cpp uses for n_draft > 1). Seeded; bf16 autocast on CPU
(fp32 master weights). Writes ckpt.pt (periodically and at the end) and metrics.json to
--work-dir. Run corpus.py first.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import DEFAULT_WORK_DIR  # noqa: E402
from model import ModelConfig, MtpLM  # noqa: E402


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-embd", type=int, default=384)
    ap.add_argument("--n-layer", type=int, default=6)
    ap.add_argument("--n-head", type=int, default=6)
    ap.add_argument("--n-ff", type=int, default=1024)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=440)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--mtp-steps", type=int, default=2)
    ap.add_argument("--mtp-weights", type=str, default="0.5,0.3")
    ap.add_argument("--mtp-target", choices=["trunk", "data"], default="trunk",
                    help="head training target: the trunk's own next-token distribution (detached; "
                         "distillation, which is what acceptance measures) or the data tokens")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--eval-windows", type=int, default=32)
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--bf16", type=int, default=1)
    ap.add_argument("--time-limit", type=float, default=0.0,
                    help="safety stop after this many seconds (0 = none); the run is then partial")
    return ap.parse_args(argv)


def load_tokens(work_dir: Path, name: str) -> torch.Tensor:
    return torch.from_numpy(np.fromfile(work_dir / f"{name}.bin", dtype=np.uint16).astype(np.int64))


def fixed_windows(data: torch.Tensor, seq_len: int, n: int | None) -> torch.Tensor:
    count = (data.numel() - 1) // seq_len
    if n is not None:
        count = min(count, n)
    # evenly spaced, non-overlapping windows of seq_len + 1 tokens
    stride = (data.numel() - 1 - seq_len) // max(count - 1, 1) if n is not None else seq_len
    return torch.stack([data[i * stride: i * stride + seq_len + 1] for i in range(count)])


def compute_losses(model, batch, mtp_steps, bf16):
    """CE losses on the data (trunk, every head step), the head's distillation loss
    (soft CE against the trunk's detached next-token distribution at the same position:
    both predict batch[:, i + 1]) and accuracies; "agree" = head argmax == trunk argmax."""
    x, y = batch[:, :-1], batch[:, 1:]
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(bf16)):
        h, gs = model(x, mtp_steps)
        trunk_logits = model.logits(h).float()
        out = {"trunk": F.cross_entropy(trunk_logits.flatten(0, 1), y.flatten())}
        teacher = trunk_logits.detach().softmax(-1)
        trunk_pred = trunk_logits.argmax(-1)
        acc = {"trunk": (trunk_pred == y).float().mean()}
        for s, g in enumerate(gs, start=1):
            logits = model.logits(g).float()
            # step s is defined from position s-1 on (its draft chain starts at a real position)
            lg, tg = logits[:, s - 1:], y[:, s - 1:]
            out[f"mtp{s}"] = F.cross_entropy(lg.flatten(0, 1), tg.flatten())
            out[f"kd{s}"] = -(teacher[:, s - 1:] * lg.log_softmax(-1)).sum(-1).mean()
            acc[f"mtp{s}"] = (lg.argmax(-1) == tg).float().mean()
            acc[f"agree{s}"] = (lg.argmax(-1) == trunk_pred[:, s - 1:]).float().mean()
    return out, acc


@torch.no_grad()
def evaluate(model, windows, mtp_steps, bf16, batch=16):
    model.eval()
    tot = {}
    n = 0
    for i in range(0, windows.shape[0], batch):
        b = windows[i:i + batch]
        losses, accs = compute_losses(model, b, mtp_steps, bf16)
        for k, v in losses.items():
            tot[f"loss_{k}"] = tot.get(f"loss_{k}", 0.0) + v.item() * b.shape[0]
        for k, v in accs.items():
            tot[f"acc_{k}"] = tot.get(f"acc_{k}", 0.0) + v.item() * b.shape[0]
        n += b.shape[0]
    model.train()
    return {k: round(v / n, 4) for k, v in sorted(tot.items())}


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    p = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * p)))


def save_ckpt(path: Path, model, cfg, args, step, metrics):
    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "config": dataclasses.asdict(cfg), "step": step,
                "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                "metrics": metrics}, tmp)
    os.replace(tmp, path)


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    weights = [float(w) for w in args.mtp_weights.split(",")][: args.mtp_steps]
    assert len(weights) == args.mtp_steps, "one --mtp-weights entry per --mtp-steps"

    meta = json.loads((args.work_dir / "corpus.json").read_text())
    cfg = ModelConfig(n_vocab=meta["vocab_size"], n_embd=args.n_embd, n_layer=args.n_layer,
                      n_head=args.n_head, n_head_kv=args.n_head, n_ff=args.n_ff)
    model = MtpLM(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"params {n_params} config {cfg}", flush=True)

    train = load_tokens(args.work_dir, "train")
    held = load_tokens(args.work_dir, "heldout")
    eval_held = fixed_windows(held, args.seq_len, args.eval_windows)

    decay = [p for p in model.parameters() if p.ndim == 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)

    metrics = {"config": dataclasses.asdict(cfg), "n_params": n_params, "args": {
        k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}, "log": [], "evals": []}
    ckpt = args.work_dir / "ckpt.pt"
    t_start = time.time()
    run_loss = {}
    step = 0
    tokens_per_step = args.batch * args.seq_len
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        starts = torch.randint(0, train.numel() - args.seq_len - 1, (args.batch,), generator=gen)
        batch = torch.stack([train[s: s + args.seq_len + 1] for s in starts.tolist()])
        losses, _ = compute_losses(model, batch, args.mtp_steps, args.bf16)
        head_key = "kd" if args.mtp_target == "trunk" else "mtp"
        loss = losses["trunk"] + sum(w * losses[f"{head_key}{s}"] for s, w in enumerate(weights, start=1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        for k, v in losses.items():
            run_loss[k] = 0.95 * run_loss.get(k, v.item()) + 0.05 * v.item()
        elapsed = time.time() - t_start
        if step % 10 == 0 or step == args.steps - 1:
            rec = {"step": step, "elapsed_s": round(elapsed, 1),
                   "tok_per_s": round((step + 1) * tokens_per_step / elapsed, 1),
                   "lr": round(lr_at(step, args), 6), **{k: round(v, 4) for k, v in run_loss.items()}}
            metrics["log"].append(rec)
            print(json.dumps(rec), flush=True)
        if (step + 1) % args.eval_every == 0 and step + 1 < args.steps:
            ev = {"step": step + 1, **evaluate(model, eval_held, args.mtp_steps, args.bf16)}
            metrics["evals"].append(ev)
            print("eval", json.dumps(ev), flush=True)
        if (step + 1) % args.ckpt_every == 0:
            save_ckpt(ckpt, model, cfg, args, step + 1, metrics)
        if args.time_limit and elapsed > args.time_limit:
            print(f"time limit hit after {step + 1} steps", flush=True)
            metrics["stopped_early_at_step"] = step + 1
            break
    train_time = time.time() - t_start
    metrics["train_time_s"] = round(train_time, 1)
    metrics["steps_done"] = step + 1
    metrics["tokens_seen"] = (step + 1) * tokens_per_step
    # final: the whole held-out split and the same number of evenly spaced train windows
    full_held = fixed_windows(held, args.seq_len, None)
    metrics["final_heldout"] = evaluate(model, full_held, args.mtp_steps, args.bf16)
    metrics["final_train"] = evaluate(model, fixed_windows(train, args.seq_len, full_held.shape[0]),
                                      args.mtp_steps, args.bf16)
    metrics["final_eval_tokens"] = int(full_held.shape[0] * args.seq_len)
    print("final heldout", json.dumps(metrics["final_heldout"]), flush=True)
    print("final train", json.dumps(metrics["final_train"]), flush=True)
    save_ckpt(ckpt, model, cfg, args, step + 1, metrics)
    (args.work_dir / "metrics.json").write_text(json.dumps(metrics, indent=1) + "\n")


if __name__ == "__main__":
    main()
