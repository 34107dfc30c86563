"""Where does the head miss? Step-1 accuracy split by the trunk's own confidence and by answer position.

For every answer row i of the chosen sequences (row i pairs x_i with h_{i-1} and drafts x_{i+1}, teacher forced,
as ``val.py``), the head's step-1 draft (argmax over the ``--draft-ids``, as the shipped trimmed head drafts) is
compared with the target. Rows are split by
  (a) the trunk's own top-1 probability of x_{i+1}: max softmax(h_i @ token_embd^T) over the full vocabulary
      (how sure the trunk itself is of the token the head has to guess one step earlier), and
  (b) the position in the answer (row i - (n_prompt - 1): 0..15, 16..63, 64..).
Targets: ``data`` = the answer's next token (the engine's acceptance: the held-out answers are the Q4_1 source's
own greedy tokens) and ``trunk`` = the trunk's argmax from the stored state (train.py ``--hard trunk``; for answers
of the Q8_0 copy). Prints one JSON object.

    .venv/bin/python tools/train_smollm2_head/diagnose.py --ckpt build/smollm2_head/ckpt.pt \\
        --draft-ids build/smollm2_head/draft-ids-8192.npy                       # held-out (val.py's 60 sequences)
    .venv/bin/python tools/train_smollm2_head/diagnose.py --ckpt ... --draft-ids ... \\
        --shards build/smollm2_head/hidden/shard-00235.npz --limit 60          # training sequences

``--alt-shards FILE...`` = the states of the same lines from another trunk (the shards of ``--shards``
from the Q4_1 source, ``--alt-shards`` the Q8_0 copy's of the same lines, e.g. ``hidden-q41/`` vs ``hidden/``). Adds
``alt``: how often the two trunks' argmax differ (full vocabulary, and over the draft ids as train.py ``--hard
trunk --draft-ids`` takes it), overall and by the primary trunk's p1 bin, and the head's step-1 accuracy (trimmed)
for each pairing of input states (primary / alt) and target (primary / alt trunk argmax over the draft ids);
also on the rows where the two hard targets differ (``where_target_differs``) and per ``--shards`` file (``by_file``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_data import DEFAULT_WORK, hidden_dir  # noqa: E402
from head_model import Head  # noqa: E402
from train import dequantized, load_shards, split_hidden  # noqa: E402

BINS = (0.0, 0.3, 0.5, 0.7, 0.9, 1.0001)
POS = ((0, 16), (16, 64), (64, 10**9))


def rows_of(head: Head, E: torch.Tensor, seqs, ids: torch.Tensor, alt=None) -> dict[str, np.ndarray]:
    """Per answer row: trunk top-1 prob, trunk argmax, data target, head trimmed/full drafts, answer position.
    ``alt``: the same sequences' states from another trunk (list of arrays): adds that trunk's
    argmax (full / over ``ids``), its p1, the primary trunk's argmax over ``ids`` and the head's trimmed draft
    when fed the alt states."""
    keys = ["p1", "trunk", "data", "head_t", "head_f", "pos", "seq"]
    if alt is not None:
        keys += ["trunk_t", "alt_trunk", "alt_trunk_t", "alt_p1", "alt_head_t"]
    cols: dict[str, list] = {k: [] for k in keys}
    Eb = E.to(torch.bfloat16)
    Et = E[ids].to(torch.bfloat16)
    Etf = E[ids]
    with torch.no_grad():
        for si, (toks, hid, n_prompt) in enumerate(seqs):
            n = len(toks)
            lo = max(n_prompt - 1, 0)
            r = torch.arange(lo, n - 1)
            x = torch.from_numpy(toks)[None]
            h, extra = split_hidden(torch.from_numpy(hid.astype(np.float32))[None], E.shape[1])
            with torch.autocast("cpu", dtype=torch.bfloat16):
                g = head.steps(E[x], h, 1, extra if head.fuse else None)[0][0]
                gb = g[r].to(torch.bfloat16)
                head_t = ids[(gb @ Et.t()).argmax(-1)]
                head_f = (gb @ Eb.t()).argmax(-1)
            tl = h[0, r] @ E.t()  # fp32: the trunk's own logits of x_{i+1}
            pr = tl.softmax(-1)
            p1, am = pr.max(-1)
            cols["p1"].append(p1.numpy())
            cols["trunk"].append(am.numpy())
            cols["data"].append(x[0, r + 1].numpy())
            cols["head_t"].append(head_t.numpy())
            cols["head_f"].append(head_f.numpy())
            cols["pos"].append((r - lo).numpy())
            cols["seq"].append(np.full(len(r), si))
            if alt is not None:
                ha = torch.from_numpy(alt[si].astype(np.float32))[None]
                assert ha.shape == h.shape, (si, ha.shape, h.shape)
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    ga = head.steps(E[x], ha, 1)[0][0][r].to(torch.bfloat16)
                    cols["alt_head_t"].append(ids[(ga @ Et.t()).argmax(-1)].numpy())
                ta = ha[0, r] @ E.t()
                pa, aa = ta.softmax(-1).max(-1)
                cols["alt_p1"].append(pa.numpy())
                cols["alt_trunk"].append(aa.numpy())
                # over the draft ids, as train.py --hard trunk --draft-ids takes its hard target (fp32 here)
                cols["alt_trunk_t"].append(ids[(ha[0, r] @ Etf.t()).argmax(-1)].numpy())
                cols["trunk_t"].append(ids[(h[0, r] @ Etf.t()).argmax(-1)].numpy())
    return {k: np.concatenate(v) for k, v in cols.items()}


def table(rows: dict[str, np.ndarray], in_ids: np.ndarray) -> dict:
    n = len(rows["p1"])

    def stats(sel: np.ndarray) -> dict:
        k = int(sel.sum())
        if k == 0:
            return {"rows": 0}
        return {
            "rows": k,
            "share": k / n,
            "acc_data_trimmed": float((rows["head_t"][sel] == rows["data"][sel]).mean()),
            "acc_trunk_trimmed": float((rows["head_t"][sel] == rows["trunk"][sel]).mean()),
            "acc_data_full": float((rows["head_f"][sel] == rows["data"][sel]).mean()),
            "trunk_argmax_is_data": float((rows["trunk"][sel] == rows["data"][sel]).mean()),
            "data_in_draft_ids": float(in_ids[rows["data"][sel]].mean()),
            "mean_p1": float(rows["p1"][sel].mean()),
            # of all step-1 misses (vs data, trimmed), the part in this slice
            "share_of_misses": float(((rows["head_t"] != rows["data"]) & sel).sum()
                                     / max((rows["head_t"] != rows["data"]).sum(), 1)),
        }

    out = {"all": stats(np.ones(n, bool)), "by_trunk_p1": {}, "by_position": {}, "by_position_x_p1": {}}
    for a, b in zip(BINS[:-1], BINS[1:]):
        out["by_trunk_p1"][f"{a:.1f}-{min(b, 1.0):.1f}"] = stats((rows["p1"] >= a) & (rows["p1"] < b))
    for a, b in POS:
        ps = (rows["pos"] >= a) & (rows["pos"] < b)
        key = f"{a}-{b - 1}" if b < 10**9 else f"{a}-"
        out["by_position"][key] = stats(ps)
        out["by_position_x_p1"][key] = {
            f"{lo:.1f}-{min(hi, 1.0):.1f}": stats(ps & (rows["p1"] >= lo) & (rows["p1"] < hi))
            for lo, hi in zip(BINS[:-1], BINS[1:])}
    if "alt_trunk" in rows:
        def alt_stats(sel: np.ndarray) -> dict:
            k = int(sel.sum())
            if k == 0:
                return {"rows": 0}
            R = {key: v[sel] for key, v in rows.items()}
            return {
                "rows": k,
                "share": k / n,
                "argmax_differs_full": float((R["trunk"] != R["alt_trunk"]).mean()),
                "argmax_differs_trimmed": float((R["trunk_t"] != R["alt_trunk_t"]).mean()),
                "alt_argmax_is_data": float((R["alt_trunk"] == R["data"]).mean()),
                "primary_argmax_is_data": float((R["trunk"] == R["data"]).mean()),
                "mean_alt_p1": float(R["alt_p1"].mean()),
                # head step-1 accuracy (trimmed draft) for input states x target (trunk argmax over the ids)
                "acc_in_primary_vs_primary": float((R["head_t"] == R["trunk_t"]).mean()),
                "acc_in_primary_vs_alt": float((R["head_t"] == R["alt_trunk_t"]).mean()),
                "acc_in_alt_vs_alt": float((R["alt_head_t"] == R["alt_trunk_t"]).mean()),
                "acc_in_alt_vs_primary": float((R["alt_head_t"] == R["trunk_t"]).mean()),
                "head_draft_differs": float((R["head_t"] != R["alt_head_t"]).mean()),
            }

        out["alt"] = {"all": alt_stats(np.ones(n, bool)), "by_trunk_p1": {
            f"{a:.1f}-{min(b, 1.0):.1f}": alt_stats((rows["p1"] >= a) & (rows["p1"] < b))
            for a, b in zip(BINS[:-1], BINS[1:])},
            # the rows whose hard target (argmax over the draft ids) the two trunks disagree on
            "where_target_differs": alt_stats(rows["trunk_t"] != rows["alt_trunk_t"])}
        if "file" in rows:
            out["alt"]["by_file"] = {str(f): alt_stats(rows["file"] == f) for f in np.unique(rows["file"])}
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work-dir", type=Path, default=DEFAULT_WORK)
    ap.add_argument("--ckpt", type=Path, required=True)
    ap.add_argument("--draft-ids", type=Path, required=True)
    ap.add_argument("--shards", type=Path, nargs="*", default=None,
                    help="these shard files (default: WORK/hidden-heldout/, val.py's sequences)")
    ap.add_argument("--alt-shards", type=Path, nargs="*", default=None,
                    help="the same lines' states from another trunk, one file per --shards file")
    ap.add_argument("--limit", type=int, default=60, help="sequences (the first LIMIT)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--hidden-dir", type=Path, default=None,
                    help="without --shards: this directory's shards instead of WORK/hidden-heldout/ (a fused "
                         "head, train.py --fuse, reads its trunk layers from them)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    import gguf

    from mtp_llm.smollm2 import source_path

    E = torch.from_numpy(dequantized(gguf.GGUFReader(str(source_path())), "token_embd.weight"))
    ck = torch.load(args.ckpt, map_location="cpu", weights_only=False)
    head = Head.from_state(ck["head"])
    files: list[int] = []  # per sequence: its index in --shards

    def read(paths, files=None) -> list:
        seqs = []
        for fi, p in enumerate(paths):
            with np.load(p) as z:
                off, tokens, hidden, n_prompt = z["offsets"], z["tokens"], z["hidden"], z["n_prompt"]
            for k in range(len(off) - 1):
                a, b = int(off[k]), int(off[k + 1])
                seqs.append((tokens[a:b].astype(np.int64), hidden[a:b], int(n_prompt[k])))
                if files is not None:
                    files.append(fi)
        return seqs

    if args.shards:
        seqs = read(args.shards, files)
    else:
        fuse = ck.get("args", {}).get("fuse", "") if head.fuse else ""
        seqs = load_shards(args.hidden_dir or hidden_dir(args.work_dir, "heldout"),
                           layers=[int(v) for v in fuse.split(",")] if fuse else None)
    seqs = seqs[: args.limit]
    alt = None
    if args.alt_shards:
        assert args.shards and len(args.alt_shards) == len(args.shards), "--alt-shards: one per --shards file"
        alt_seqs = read(args.alt_shards)[: args.limit]
        assert len(alt_seqs) == len(seqs) and all(
            np.array_equal(a[0], b[0]) and a[2] == b[2] for a, b in zip(seqs, alt_seqs)), "not the same sequences"
        alt = [h for _, h, _ in alt_seqs]
    ids = torch.from_numpy(np.load(args.draft_ids).astype(np.int64))
    in_ids = np.zeros(E.shape[0], bool)
    in_ids[ids.numpy()] = True
    rows = rows_of(head, E, seqs, ids, alt)
    if files and alt is not None:
        rows["file"] = np.asarray(files)[rows["seq"]]
    out = {"ckpt": str(args.ckpt), "step": ck.get("step"), "n_ff": head.n_ff,
           "data": [str(p) for p in args.shards] if args.shards else str(args.hidden_dir or "hidden-heldout"),
           "alt_data": [str(p) for p in args.alt_shards] if args.alt_shards else None,
           "sequences": len(seqs), **table(rows, in_ids)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
