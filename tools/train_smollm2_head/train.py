"""Train the MTP head by self-distillation: trunk frozen, targets = the model's own greedy tokens.

Reads the shards of hidden.py (tokens + the trunk's post-norm hidden states), starts from the initial head
(``mtp_llm.smollm2.initial_head``: the trunk's last block, dequantized) or from ``--init CKPT``, and trains the head
on the answer positions with teacher forcing for ``len(--step-weights)`` draft steps (step s > 1 feeds the head its
own previous output, as llama.cpp's draft-mtp does; loss weights ``--step-weights``). The LM head is the trunk's
token_embd (Q8_0, dequantized, frozen). Targets: the generated token or the trunk's argmax (``--hard``) mixed with
the trunk's own distribution of it (``--soft``: its logits at the previous position, from the same hidden states).
The softmax runs over the data's tokens (``--vocab data``) or exactly the ids of ``--draft-ids`` (int64 .npy, the
trimmed draft vocabulary the built-in model ships; rows whose target is outside them are dropped, and validation
also reports the acceptance with the argmax over those ids: "trimmed"). bf16 autocast (``--fp32``: none), fp32
master weights, AdamW, warmup + cosine. Checkpoints ``WORK/ckpt[-NAME].pt`` every ``--ckpt-every`` steps and at the
end; a rerun resumes from it (same command). Log: ``WORK/train[-NAME].log``.

Options for continuing a trained head:
``--run NAME`` keeps a run's files apart (``WORK/ckpt-NAME.pt``, ``train-NAME.log``, ``val-NAME.json``);
``--init CKPT`` starts a fresh run (new optimizer and schedule) from another run's head weights;
``--time-budget S`` drives warmup + cosine by elapsed training seconds as well as by steps (whichever is further),
so the schedule ends on time on a shared, noisy machine; ``--upweight START:W`` samples the sequences from gen.jsonl
line START on W times as often (the shards' ``first_line``, so it stays right when shards are missing);
``--weight-decay``; ``--val-draft`` drafts this many steps in the engine-like validation whatever ``--step-weights``
trains; ``--keep-best`` writes the head of the best VAL so far (n_draft 1, trimmed with ``--draft-ids``) to
``WORK/ckpt-NAME-best.pt``; ``--ema DECAY`` keeps an exponential moving average of the weights
(``WORK/ckpt-NAME-ema.pt``).

Experimental options (no shipped head uses them): ``--widen-ff N`` (a wider FFN in the head block, function-preserving:
old gate/up rows and down-proj columns copied, new down-proj columns zero); ``--hidden-dirs A,B`` (shards of several
directories, a file name taken from the first that has it) with ``--dir-weights``; ``--fuse 9,19`` (the head also
takes these trunk layers' residual-stream outputs at step 1, ``head_model.Head.fused``, W = 0 at the start; the
shards must hold them: hidden.py ``--backend torch --layers``) with ``--heldout-dir``; ``--stop-at K`` (checkpoint
and exit at step K, the same command resumes: two arms can alternate and stay at equal steps); ``--log-cpu``.

    nice -n 19 .venv/bin/python tools/train_smollm2_head/train.py --steps 1500 --threads 2
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_data import DEFAULT_WORK, hidden_dir  # noqa: E402
from head_model import Head  # noqa: E402


def dequantized(reader, name: str) -> np.ndarray:
    import gguf

    t = next(t for t in reader.tensors if t.name == name)
    return gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32)


def initial_tensors(source: Path) -> dict[str, np.ndarray]:
    import gguf

    from mtp_llm.smollm2 import initial_head

    out = {}
    for name, (qtype, data) in initial_head(source).items():
        out[name] = gguf.quants.dequantize(np.asarray(data), qtype).astype(np.float32)
    return out


def load_shards(hdir, lines: list[int] | None = None, srcs: list[int] | None = None,
                layers: list[int] | None = None, layers_dir: Path | None = None) -> list[tuple[np.ndarray, np.ndarray, int]]:
    """The sequences of every shard, in shard-file order. ``lines`` (a list) receives each sequence's gen.jsonl
    line: the shard's ``first_line`` (hidden.py) + k, or for older shards without it the running
    count (shards then cover lines 0.. contiguously). ``hdir`` may be a list of directories: a
    file name is taken from the first directory that has it; ``srcs`` receives each sequence's directory index.
    ``layers``: also these stored intermediate layers (hidden.py ``--layers``), appended to each
    sequence's hidden array ([T, (1 + len(layers)) * 576]; ``split_hidden`` takes them apart), read from the same
    file or from the file of the same name in ``layers_dir`` (tokens checked equal)."""
    dirs = list(hdir) if isinstance(hdir, (list, tuple)) else [hdir]
    files: dict[str, tuple[Path, int]] = {}
    for di, d in enumerate(dirs):
        for path in d.glob("shard-*.npz"):
            if ".tmp" not in path.name and path.name not in files:
                files[path.name] = (path, di)
    seqs = []
    for name in sorted(files):
        path, di = files[name]
        with np.load(path) as z:  # each z[key] reads the whole array again: once per shard
            off, tokens, hidden, n_prompt = z["offsets"], z["tokens"], z["hidden"], z["n_prompt"]
            first = int(z["first_line"]) if "first_line" in z.files else len(seqs)
        if layers:
            with np.load(layers_dir / name if layers_dir else path) as zl:
                assert np.array_equal(zl["tokens"], tokens), f"{name}: not the same tokens"
                ids = [int(v) for v in zl["layer_ids"]]
                lay = zl["layers"][:, [ids.index(k) for k in layers]]
            hidden = np.concatenate([hidden, lay.reshape(len(lay), -1)], axis=1)
        for k in range(len(off) - 1):
            a, b = int(off[k]), int(off[k + 1])
            seqs.append((tokens[a:b].astype(np.int64), hidden[a:b], int(n_prompt[k])))
            if lines is not None:
                lines.append(first + k)
            if srcs is not None:
                srcs.append(di)
    return seqs


def data_vocab(seqs, n_vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The tokens that occur in the data (every target is one) and a map token -> index in it."""
    vocab = torch.from_numpy(np.unique(np.concatenate([t for t, _, _ in seqs])))
    remap = torch.full((n_vocab,), -1, dtype=torch.long)
    remap[vocab] = torch.arange(len(vocab))
    return vocab, remap


def split_hidden(h: torch.Tensor, n_embd: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """[..., (1 + n) * E] -> the final state [..., E] and the n intermediate layers [..., n, E] (or None)."""
    if h.shape[-1] == n_embd:
        return h, None
    return h[..., :n_embd], h[..., n_embd:].reshape(*h.shape[:-1], -1, n_embd)


def batch_loss(head: Head, E: torch.Tensor, batch, weights: list[float], max_len: int, vocab=None,
               soft: float = 0.0, hard: str = "data", fp32: bool = False):
    tlen = min(max_len, max(len(t) for t, _, _ in batch))
    B = len(batch)
    x = torch.zeros(B, tlen, dtype=torch.long)
    h = torch.zeros(B, tlen, batch[0][1].shape[1])
    tgt_mask = torch.zeros(B, tlen, dtype=torch.bool)
    for b, (toks, hid, n_prompt) in enumerate(batch):
        n = min(len(toks), tlen)
        x[b, :n] = torch.from_numpy(toks[:n])
        h[b, :n] = torch.from_numpy(hid[:n].astype(np.float32))
        # row i predicts x[i+1]: train where x[i+1] is an answer token
        lo = max(n_prompt - 1, 0)
        tgt_mask[b, lo : n - 1] = True
    target = torch.cat([x[:, 1:], torch.zeros(B, 1, dtype=torch.long)], dim=1)
    if vocab is not None:  # a target outside a --draft-ids vocabulary: no draft can be right there
        tgt_mask &= vocab[1][target] >= 0
    emb = E[x]
    h, extra = split_hidden(h, E.shape[1])
    dt = torch.float32 if fp32 else torch.bfloat16  # --fp32: no autocast, fp32 products
    with contextlib.nullcontext() if fp32 else torch.autocast("cpu", dtype=torch.bfloat16):
        gs = head.steps(emb, h, len(weights), extra if head.fuse else None)
        losses, accs = [], []
        # the softmax runs over the tokens of the data only (--vocab data): 5-6x less work than
        # the 49152-token LM head, and every target is among them
        if vocab is None:
            Eb, tsel = E.to(dt), target[tgt_mask]
        else:
            Eb, tsel = E[vocab[0]].to(dt), vocab[1][target[tgt_mask]]
        if soft > 0 or hard == "trunk":  # the trunk's own distribution of x[i+1]: its logits at position i (h[i])
            with torch.no_grad():
                teacher = (h[tgt_mask].to(dt) @ Eb.t()).float().softmax(-1)
            if hard == "trunk":  # what the trunk itself would write there (answers made by another model)
                tsel = teacher.argmax(-1)
        for g in gs:
            sel = g[tgt_mask]
            logits = sel.to(dt) @ Eb.t()
            hard = F.cross_entropy(logits.float(), tsel)
            if soft > 0:
                hard = (1 - soft) * hard + soft * F.cross_entropy(logits.float(), teacher)
            losses.append(hard)
            accs.append((logits.argmax(-1) == tsel).float().mean().item())
    total = sum(w * l for w, l in zip(weights, losses))
    return total, [l.item() for l in losses], accs, int(tgt_mask.sum())


def correct_per_step(head: Head, E: torch.Tensor, seqs, n_steps: int, ids: torch.Tensor | None = None) -> list[np.ndarray]:
    """Per sequence, [n_steps, T] booleans: step s at row i drafts x[i+1] right (full-vocabulary argmax,
    as llama.cpp drafts; ``ids``: the argmax over these token ids only, a trimmed head), with the earlier
    steps' inputs teacher forced."""
    out = []
    Eb = (E if ids is None else E[ids]).to(torch.bfloat16)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        for toks, hid, _ in seqs:
            x = torch.from_numpy(toks)[None]
            h, extra = split_hidden(torch.from_numpy(hid.astype(np.float32))[None], E.shape[1])
            gs = head.steps(E[x], h, n_steps, extra if head.fuse else None)
            rows = []
            for g in gs:
                pred = (g[0].to(torch.bfloat16) @ Eb.t()).argmax(-1)
                if ids is not None:
                    pred = ids[pred]
                rows.append((pred[:-1] == x[0, 1:]).numpy())
            out.append(np.stack(rows))
    return out


def simulate_engine(correct: list[np.ndarray], n_prompts: list[int], n_draft: int) -> dict:
    """What the engine's greedy MTP loop would count on these answers: drafting starts at the first
    answer token; a pass drafts up to n_draft tokens (step s at row p+s-1) and accepts the leading
    correct ones; the next pass starts after them and the target's own token."""
    drafted = np.zeros(n_draft, np.int64)
    accepted = np.zeros(n_draft, np.int64)
    passes = 0
    for c, n_prompt in zip(correct, n_prompts):
        last = c.shape[1]  # rows 0..last-1 have a next token
        p = n_prompt
        while p < last:
            n = min(n_draft, last - p)
            k = 0
            while k < n and c[k, p + k]:
                k += 1
            drafted[:n] += 1
            accepted[:k] += 1
            passes += 1
            p += k + 1
    return {
        "acceptance": float(accepted.sum() / max(drafted.sum(), 1)),
        "per_position": [float(a / d) if d else 0.0 for a, d in zip(accepted, drafted)],
        "tokens_per_verify": float(1 + accepted.sum() / max(passes, 1)),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work-dir", type=Path, default=DEFAULT_WORK)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--max-len", type=int, default=320)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--step-weights", type=str, default="1.0,0.5,0.25")
    ap.add_argument("--ckpt-every", type=int, default=25)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--time-limit", type=float, default=1e9, help="seconds; checkpoint and stop after")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab", choices=("data", "full"), default="data")
    ap.add_argument("--soft", type=float, default=0.5,
                    help="weight of the soft target (the trunk's own distribution of the token) vs the hard one")
    ap.add_argument("--hard", choices=("data", "trunk"), default="trunk",
                    help="hard target: the answer's next token, or the trunk's own argmax there (the same for "
                         "answers the Q4_1 source wrote; the right one for answers of requant.py's Q8_0 copy)")
    ap.add_argument("--heldout", type=int, default=40,
                    help="validation sequences from hidden-heldout/ (held-out prompts), when it exists")
    ap.add_argument("--reload-every", type=int, default=20, help="steps between looks for new shards")
    ap.add_argument("--run", type=str, default="", help="run name: WORK/ckpt-NAME.pt, train-NAME.log, val-NAME.json")
    ap.add_argument("--init", type=Path, default=None, help="fresh run from this checkpoint's head weights")
    ap.add_argument("--time-budget", type=float, default=0.0,
                    help="seconds of training; the lr schedule follows max(step/steps, elapsed/budget), then stops")
    ap.add_argument("--upweight", type=str, default="", help="START:W: sequences from index START sampled W times as often")
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--hidden-dirs", type=str, default="",
                    help="comma-separated shard directories, earlier ones win per file name (default WORK/hidden)")
    ap.add_argument("--dir-weights", type=str, default="",
                    help="comma-separated sampling multipliers, one per --hidden-dirs directory")
    ap.add_argument("--val-draft", type=int, default=3, help="draft steps of the engine-like validation")
    ap.add_argument("--draft-ids", type=Path, default=None,
                    help="int64 .npy of token ids: softmax over exactly these (the shipped trimmed draft vocabulary)")
    ap.add_argument("--keep-best", action="store_true",
                    help="write the head of the best VAL so far (n_draft 1; trimmed with --draft-ids) to "
                         "WORK/ckpt-NAME-best.pt")
    ap.add_argument("--fp32", action="store_true",
                    help="train without bf16 autocast (fp32 products); validation stays bf16 as before")
    ap.add_argument("--ema", type=float, default=0.0,
                    help="DECAY: keep an exponential moving average of the weights, WORK/ckpt-NAME-ema.pt")
    ap.add_argument("--widen-ff", type=int, default=0,
                    help="N: a fresh run (--init or the initial head) gets N FFN units instead of its own, "
                         "function-preserving (old rows copied, new down-proj columns zero)")
    ap.add_argument("--widen-scale", type=float, default=1.0,
                    help="std of the new gate/up rows of --widen-ff, relative to the old rows' std")
    ap.add_argument("--fuse", type=str, default="",
                    help="L1,L2,..: a fresh run's head also takes these trunk layers at step 1")
    ap.add_argument("--heldout-dir", type=Path, default=None,
                    help="validation shards (default WORK/hidden-heldout/)")
    ap.add_argument("--stop-at", type=int, default=0, help="checkpoint and exit at this step")
    ap.add_argument("--log-cpu", action="store_true", help="step lines also give rows per CPU second")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    fuse_ids = [int(v) for v in args.fuse.split(",")] if args.fuse else None
    weights = [float(w) for w in args.step_weights.split(",")]

    import gguf

    from mtp_llm.smollm2 import source_path

    work = args.work_dir
    sfx = f"-{args.run}" if args.run else ""
    log = (work / f"train{sfx}.log").open("a")

    def say(msg: str) -> None:
        line = time.strftime("%H:%M:%S ") + msg
        print(line, flush=True)
        log.write(line + "\n")
        log.flush()

    source = source_path()
    E = torch.from_numpy(dequantized(gguf.GGUFReader(str(source)), "token_embd.weight"))
    step = 0
    ckpt = work / f"ckpt{sfx}.pt"
    rng = np.random.default_rng(args.seed)
    elapsed0 = 0.0  # training seconds before this process (resume)
    best = -1.0
    ema = None
    # the head is shaped as the checkpoint it starts from (any n_ff), widened by --widen-ff
    ck = torch.load(ckpt, map_location="cpu", weights_only=False) if ckpt.exists() else None
    if ck is not None:
        head = Head.from_state(ck["head"])
    elif args.init is not None:
        head = Head.from_state(torch.load(args.init, map_location="cpu", weights_only=False)["head"])
    else:
        head = Head(initial_tensors(source))
    if ck is None and args.widen_ff and args.widen_ff > head.n_ff:
        say(f"--widen-ff: n_ff {head.n_ff} -> {args.widen_ff} (new down-proj columns zero: same function)")
        head = head.widened(args.widen_ff, seed=args.seed, scale=args.widen_scale)
    if ck is None and fuse_ids and not head.fuse:
        say(f"--fuse {args.fuse}: step 1 also takes trunk layers {fuse_ids} (W = 0: same function)")
        head = head.fused(len(fuse_ids))
    if fuse_ids:
        assert head.fuse == len(fuse_ids), (head.fuse, fuse_ids)
    opt = torch.optim.AdamW(head.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=args.weight_decay)
    if ck is not None:
        opt.load_state_dict(ck["opt"])
        step = ck["step"]
        elapsed0 = ck.get("elapsed", 0.0)
        best = ck.get("best", -1.0)
        ema = ck.get("ema")
        rng = np.random.default_rng([args.seed, step])
        say(f"resumed at step {step}")
    elif args.init is not None:
        say(f"initial head from {args.init}")
    say(f"head: n_ff {head.n_ff}, fuse {head.fuse}, {sum(p.numel() for p in head.parameters())} parameters")
    if args.ema > 0 and ema is None:
        ema = {k: v.detach().clone().float() for k, v in head.state_dict().items()}

    def write(path: Path, obj: dict) -> None:
        tmp = path.with_suffix(".tmp")
        torch.save(obj, tmp)
        tmp.replace(path)

    def save() -> None:
        write(ckpt, {"head": head.state_dict(), "opt": opt.state_dict(), "step": step, "args": vars(args),
                     "elapsed": elapsed0 + time.time() - t0, "best": best, "ema": ema})
        if ema is not None:
            write(work / f"ckpt{sfx}-ema.pt", {"head": ema, "step": step, "args": vars(args), "ema": args.ema})

    seq_lines: list[int] = []
    seq_srcs: list[int] = []
    train_dirs = [Path(d) for d in args.hidden_dirs.split(",")] if args.hidden_dirs else [hidden_dir(work)]
    dir_w = [float(w) for w in args.dir_weights.split(",")] if args.dir_weights else [1.0] * len(train_dirs)
    seqs = load_shards(train_dirs, seq_lines, seq_srcs, layers=fuse_ids)
    heldout = load_shards(args.heldout_dir or hidden_dir(work, "heldout"), layers=fuse_ids)[: args.heldout]
    n_val = 0 if heldout else max(8, len(seqs) // 30)
    val, train = (heldout if heldout else seqs[:n_val]), seqs[n_val:]
    say(f"validation: {'held-out prompts' if heldout else 'train-prompt sequences'} ({len(val)})")
    say(f"{len(train)} train / {len(val)} val sequences, {sum(len(t) for t, _, _ in train)} train tokens")
    vocab = data_vocab(seqs, E.shape[0])
    say(f"data vocabulary: {len(vocab[0])} tokens")
    draft_ids = None
    if args.draft_ids is not None:
        draft_ids = torch.from_numpy(np.load(args.draft_ids).astype(np.int64))
        remap = torch.full((E.shape[0],), -1, dtype=torch.long)
        remap[draft_ids] = torch.arange(len(draft_ids))
        vocab = (draft_ids, remap)
        say(f"softmax over the {len(draft_ids)} ids of {args.draft_ids}")
    t0 = time.time()
    n_rows = 0
    cpu0, cpu_rows = None, 0  # --log-cpu: counted from the first step's end (excludes loading)

    def sample_p(n: int):
        if not args.upweight and not args.dir_weights:
            return None
        p = np.ones(n)  # by gen.jsonl line (shards may be missing, so not by position)
        if args.upweight:
            p[upweighted()] = float(args.upweight.split(":")[1])
        if args.dir_weights:
            p *= np.asarray(dir_w)[np.asarray(seq_srcs[n_val:], np.int64)]
        return p / p.sum()

    def upweighted() -> np.ndarray:
        return np.asarray(seq_lines[n_val:]) >= int(args.upweight.split(":")[0])

    p_train = sample_p(len(train))
    if args.upweight:
        say(f"--upweight {args.upweight}: {int(upweighted().sum())} of {len(train)} train sequences")
    if len(train_dirs) > 1 or args.dir_weights:
        cnt = np.bincount(np.asarray(seq_srcs[n_val:], np.int64), minlength=len(train_dirs))
        say("sequences per directory: " + ", ".join(f"{d} {c} (x{w})" for d, c, w in zip(train_dirs, cnt, dir_w)))

    def progress() -> float:
        frac = step / args.steps
        if args.time_budget > 0:
            frac = max(frac, (elapsed0 + time.time() - t0) / args.time_budget)
        return min(frac, 1.0)

    while progress() < 1.0:
        if step % args.reload_every == 0:  # pick up shards that hidden.py wrote meanwhile
            more_lines: list[int] = []
            more_srcs: list[int] = []
            more = load_shards(train_dirs, more_lines, more_srcs, layers=fuse_ids)
            if len(more) > len(seqs) or more_srcs != seq_srcs:
                seqs, seq_lines, seq_srcs = more, more_lines, more_srcs
                train = seqs[n_val:]
                p_train = sample_p(len(train))
                if draft_ids is None:
                    vocab = data_vocab(seqs, E.shape[0])
                say(f"{len(train)} train sequences")
        frac = progress()
        lr = args.lr * min(1.0, (step + 1) / args.warmup) * 0.5 * (1 + math.cos(math.pi * frac))
        for group in opt.param_groups:
            group["lr"] = max(lr, args.lr * 0.05)
        idx = rng.choice(len(train), size=args.batch, replace=False, p=p_train)
        loss, losses, accs, rows = batch_loss(head, E, [train[i] for i in idx], weights, args.max_len,
                                              vocab if args.vocab == "data" else None, args.soft, args.hard,
                                              args.fp32)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        if ema is not None:
            with torch.no_grad():
                for k, v in head.state_dict().items():
                    if v.is_floating_point():
                        ema[k].mul_(args.ema).add_(v.float(), alpha=1 - args.ema)
                    else:
                        ema[k] = v.clone()
        step += 1
        n_rows += rows
        if args.log_cpu:
            if cpu0 is None:
                cpu0 = time.process_time()
            else:
                cpu_rows += rows
        if step % 2 == 0:
            cpu = (f" {cpu_rows / max(time.process_time() - cpu0, 1e-9):.0f} rows/cpu-s"
                   if args.log_cpu and cpu_rows else "")
            say(f"step {step} loss {' '.join(f'{v:.3f}' for v in losses)} acc {' '.join(f'{a:.3f}' for a in accs)} "
                f"lr {lr:.2e} {n_rows / (time.time() - t0):.0f} rows/s{cpu}")
        last = progress() >= 1.0
        if step % args.ckpt_every == 0 or last:
            save()
        if step % args.eval_every == 0 or last:
            with torch.no_grad():
                res = [batch_loss(head, E, val[i : i + 8], weights, args.max_len) for i in range(0, len(val), 8)]
            # (validation: the full 49152-token softmax, as llama.cpp drafts)
            n = sum(r[3] for r in res)
            acc = [sum(r[2][s] * r[3] for r in res) / n for s in range(len(weights))]
            ce = [sum(r[1][s] * r[3] for r in res) / n for s in range(len(weights))]
            nd_max = max(args.val_draft, len(weights))
            correct = correct_per_step(head, E, val, nd_max)
            sims = {nd: simulate_engine(correct, [n for _, _, n in val], nd) for nd in sorted({1, nd_max})}
            trim = ""
            sims_t = None
            if draft_ids is not None:
                correct_t = correct_per_step(head, E, val, nd_max, draft_ids)
                sims_t = {nd: simulate_engine(correct_t, [n for _, _, n in val], nd) for nd in sorted({1, nd_max})}
                trim = (f" | trimmed: {sims_t[1]['acceptance']:.3f}, "
                        f"{sims_t[nd_max]['tokens_per_verify']:.2f} tokens/verify")
            say(f"VAL step {step} ce {' '.join(f'{v:.3f}' for v in ce)} acc {' '.join(f'{a:.3f}' for a in acc)} "
                f"| engine-like: n_draft=1 acceptance {sims[1]['acceptance']:.3f}, n_draft={nd_max} "
                f"{sims[nd_max]['tokens_per_verify']:.2f} tokens/verify{trim}")
            (work / f"val{sfx}.json").write_text(json.dumps({"step": step, "ce": ce, "acc": acc, "simulated": sims,
                                                             "simulated_trimmed": sims_t}) + "\n")
            score = (sims_t or sims)[1]["acceptance"]
            if args.keep_best and score > best:
                best = score
                write(work / f"ckpt{sfx}-best.pt", {"head": head.state_dict(), "step": step, "args": vars(args),
                                                    "val": score})
                save()  # the checkpoint remembers the best score (resume)
                say(f"best so far: step {step} ({score:.4f})")
        if time.time() - t0 > args.time_limit:
            save()
            say("time limit reached")
            break
        if args.stop_at and step >= args.stop_at and not last:
            save()
            say(f"--stop-at {args.stop_at}: stopped")
            break
    say("done")


if __name__ == "__main__":
    main()
