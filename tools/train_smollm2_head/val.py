"""Held-out validation of a checkpoint, exactly as train.py's VAL lines compute it, without training.

Loads the head from ``--ckpt``, the first ``--heldout`` sequences of ``WORK/hidden-heldout/`` and prints
the teacher-forced cross-entropy and accuracy per draft step plus the engine-like acceptance
(``simulate_engine``, which matched the engine within 0.02) at n_draft 1 and ``--draft``. Puts checkpoints
of different runs on the same validation set (60 sequences by default; train.py's ``--heldout`` defaults to 40).

    .venv/bin/python tools/train_smollm2_head/val.py --ckpt build/smollm2_head/ckpt.pt

A checkpoint of a fused head (train.py ``--fuse``) reads its trunk layers from the shards (``--hidden-dir``
made by hidden.py ``--layers``, e.g. ``WORK/hidden-heldout-fuse/``) or, with ``--layers-dir DIR``, from DIR's shards of
the same names while the final states come from ``--hidden-dir`` (e.g. llama.cpp's final states + torch's layers).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_data import DEFAULT_WORK, hidden_dir  # noqa: E402
from head_model import Head  # noqa: E402
from train import batch_loss, correct_per_step, dequantized, load_shards, simulate_engine  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work-dir", type=Path, default=DEFAULT_WORK)
    ap.add_argument("--ckpt", type=Path, required=True)
    ap.add_argument("--heldout", type=int, default=60)
    ap.add_argument("--draft", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--hidden-dir", type=Path, default=None,
                    help="validate on these shards instead of WORK/hidden-heldout/ (e.g. unseen train "
                         "lines); --heldout still caps the sequences")
    ap.add_argument("--draft-ids", type=Path, default=None,
                    help="also the engine-like acceptance of the head trimmed to these ids (int64 .npy)")
    ap.add_argument("--layers-dir", type=Path, default=None,
                    help="a fused head's intermediate layers from these shards (same file names)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    import gguf

    from mtp_llm.smollm2 import source_path

    source = source_path()
    E = torch.from_numpy(dequantized(gguf.GGUFReader(str(source)), "token_embd.weight"))
    ck = torch.load(args.ckpt, map_location="cpu", weights_only=False)
    head = Head.from_state(ck["head"])  # shaped as the checkpoint (any n_ff)
    fuse = ck.get("args", {}).get("fuse", "") if head.fuse else ""
    layers = [int(v) for v in fuse.split(",")] if fuse else None
    val = load_shards(args.hidden_dir or hidden_dir(args.work_dir, "heldout"), layers=layers,
                      layers_dir=args.layers_dir)[: args.heldout]
    weights = [1.0] * args.draft
    with torch.no_grad():
        res = [batch_loss(head, E, val[i : i + 8], weights, 320) for i in range(0, len(val), 8)]
    n = sum(r[3] for r in res)
    acc = [sum(r[2][s] * r[3] for r in res) / n for s in range(args.draft)]
    ce = [sum(r[1][s] * r[3] for r in res) / n for s in range(args.draft)]
    correct = correct_per_step(head, E, val, args.draft)
    sims = {nd: simulate_engine(correct, [p for _, _, p in val], nd) for nd in sorted({1, args.draft})}
    out = {"ckpt": str(args.ckpt), "step": ck["step"], "n_ff": head.n_ff, "fuse": fuse,
           "hidden_dir": str(args.hidden_dir or hidden_dir(args.work_dir, "heldout")), "sequences": len(val), "rows": n,
           "ce": ce, "acc": acc, "simulated": sims}
    if args.draft_ids is not None:
        import numpy as np

        ids = torch.from_numpy(np.load(args.draft_ids).astype(np.int64))
        correct_t = correct_per_step(head, E, val, args.draft, ids)
        out["draft_ids"] = str(args.draft_ids)
        out["simulated_trimmed"] = {nd: simulate_engine(correct_t, [p for _, _, p in val], nd)
                                    for nd in sorted({1, args.draft})}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
